"""Where a request's cost goes: per hop, per layer (routing, expert cache, experts) and per expert.

A request costs each hop's latency at its layer's hourly rate (`costs.record_cost`: L3 at the host's
depreciation + power, L1 and L2 at its operations). The parts:

- **per hop**: each hop's latency × its layer's rate;
- **per layer**: L1 is routing, L2 the expert cache, L3 the experts (the sums of their hops);
- **per expert**: the L3 cost goes to the experts by their token share in each layer, each layer of the
  request weighing the same (a layer's experts share 1 / layers of it, by their tokens); the L2 cost goes
  to the experts the request fetched from the cache, one equal share per (layer, expert) (each was one
  lookup: a hit or a load; the record counts hits and misses, not which expert missed). A request
  without experts keeps its L2 and L3 cost unattributed.

**Remainder rule.** The total is rounded half up to the unit (a request's to a billionth of the
currency, a period's to the currency's minor unit); the parts are each rounded down to the unit and the
units left over go one each to the parts with the largest remainders (ties: the earlier part in order:
hop order, or (layer, expert)). So the parts add up to the rounded total exactly, and no part is more
than one unit from its exact share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from .taxes import apportion

ZERO = Decimal(0)
# A request's parts are given to a billionth of the currency: one costs about a thousandth.
REQUEST_UNIT = Decimal("1E-9")
US_PER_HOUR = Decimal(3_600_000_000)
LAYERS = ("L1", "L2", "L3")


@dataclass(frozen=True)
class Rates:
    """A host's cost per hour of each layer's time (catalog.HostCostProfile)."""

    l3_per_hour: Decimal  # depreciation + power
    l1_l2_per_hour: Decimal  # operations

    def per_us(self, layer: str) -> Decimal:
        hourly = self.l3_per_hour if layer.upper() == "L3" else self.l1_l2_per_hour
        return hourly / US_PER_HOUR


def allocate(total: Decimal, weights: Sequence[Decimal], unit: Decimal) -> list[Decimal]:
    """`total` (a multiple of `unit`) split in proportion to `weights` (non-negative), in units, adding up
    to `total` exactly by the remainder rule (`taxes.apportion`). No weight at all (or all zero) leaves
    nothing to split to: every share is zero and the caller keeps the total as unattributed."""
    whole = sum(weights, ZERO)
    if not whole:
        return [ZERO] * len(weights)
    return apportion(total, [total * w / whole for w in weights], unit)


def round_total(amount: Decimal, unit: Decimal) -> Decimal:
    return amount.quantize(unit, rounding=ROUND_HALF_UP)


def expert_weights(experts: Sequence[Mapping[str, int]]) -> list[Decimal]:
    """Each (layer, expert)'s share of the L3 time: 1 / layers of it, by its tokens in its layer."""
    by_layer: dict[int, int] = {}
    for e in experts:
        by_layer[e["layer"]] = by_layer.get(e["layer"], 0) + e["tokens"]
    layers = Decimal(len(by_layer))
    return [Decimal(e["tokens"]) / (Decimal(by_layer[e["layer"]]) * layers) for e in experts]


@dataclass(frozen=True)
class CostPart:
    """One part of a request's cost: a hop (`"1 L1 router-1"`: its position, layer and node), a layer,
    or an expert (`"L3 layer 0 expert 4"`, `"L2 layer 0 expert 4"`)."""

    name: str
    amount: Decimal


@dataclass(frozen=True)
class RequestCostSplit:
    total: Decimal
    hops: list[CostPart]
    layers: list[CostPart]
    experts: list[CostPart]
    unattributed: Decimal  # L2 and L3 cost of a request without experts

    def as_json(self) -> dict[str, Any]:
        parts = {"hops": self.hops, "layers": self.layers, "experts": self.experts}
        return {
            "total": str(self.total),
            **{k: [{"name": p.name, "amount": str(p.amount)} for p in v] for k, v in parts.items()},
            "unattributed": str(self.unattributed),
        }


def split_request_cost(
    record: Mapping[str, Any], rates: Rates, unit: Decimal = REQUEST_UNIT
) -> RequestCostSplit:
    """A record's cost (its hops at `rates`) split per hop, layer and expert, to `unit`."""
    hops = record["hops"]
    exact = [Decimal(h["latency_us"]) * rates.per_us(h["layer"]) for h in hops]
    total = round_total(sum(exact, ZERO), unit)
    per_hop = allocate(total, exact, unit)
    hop_parts = [
        CostPart(f"{k + 1} {h['layer']} {h['node']}", amount)
        for k, (h, amount) in enumerate(zip(hops, per_hop, strict=True))
    ]
    layer_totals = {
        layer: sum((a for h, a in zip(hops, per_hop, strict=True) if h["layer"].upper() == layer), ZERO)
        for layer in LAYERS
    }
    experts = record.get("experts") or []
    expert_parts: list[CostPart] = []
    unattributed = ZERO
    if experts:
        names = [f"layer {e['layer']} expert {e['expert']}" for e in experts]
        l3 = allocate(layer_totals["L3"], expert_weights(experts), unit)
        l2 = allocate(layer_totals["L2"], [Decimal(1)] * len(experts), unit)
        expert_parts = [CostPart(f"L3 {n}", a) for n, a in zip(names, l3, strict=True)]
        expert_parts += [CostPart(f"L2 {n}", a) for n, a in zip(names, l2, strict=True)]
    else:
        unattributed = layer_totals["L2"] + layer_totals["L3"]
    return RequestCostSplit(
        total,
        hop_parts,
        [CostPart(layer, layer_totals[layer]) for layer in LAYERS],
        expert_parts,
        unattributed,
    )
