"""Route-jitter and expert-health signals (seed 003), fed into the same alerts as burn rates.

- Route jitter: the population standard deviation of the per-bucket P95 end-to-end latency over a
  sliding window (5-minute buckets over the last hour); above 50 ms it is an alert.
- Expert hit rate: each expert's share of its layer's routed tokens over a window.
- A silent expert: routed to in the baseline (the day before the recent window) but not at all in the
  recent hour while its layer still had traffic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from clickhouse_store.queries import sla as sla_sql
from contracts.models import Contract

from .alerting import Condition, reconcile
from .models import SlaAlert
from .selectors import contract_codes

JITTER_WINDOW = timedelta(hours=1)
JITTER_BUCKET_MINUTES = 5
JITTER_LIMIT_MS = Decimal(50)
JITTER_MIN_BUCKETS = 3
RECENT = timedelta(hours=1)
BASELINE = timedelta(days=1)


def route_jitter_ms(contracts: Sequence[Contract], now: datetime) -> dict[str, tuple[int, Decimal]]:
    """{contract code: (buckets with traffic, stddev of their P95 in ms)} over the window ending at `now`;
    contracts without served requests are left out."""
    rows = sla_sql.p95_spread(*contract_codes(contracts), now - JITTER_WINDOW, now, JITTER_BUCKET_MINUTES)
    return {
        code: (buckets, Decimal(str(spread)).quantize(Decimal("0.001"))) for code, buckets, spread in rows
    }


@dataclass(frozen=True)
class ExpertUse:
    layer: int
    expert: int
    baseline_tokens: int
    recent_tokens: int


def expert_use(contracts: Sequence[Contract], now: datetime) -> dict[str, list[ExpertUse]]:
    """{contract code: tokens routed to each (layer, expert) in the baseline day and the recent hour}."""
    recent = now - RECENT
    uses: dict[str, list[ExpertUse]] = {c.code: [] for c in contracts}
    for code, layer, expert, before, after in sla_sql.expert_tokens(
        *contract_codes(contracts), recent - BASELINE, recent, now
    ):
        uses[code].append(ExpertUse(layer, expert, before, after))
    return uses


def expert_hit_rates(uses: list[ExpertUse]) -> dict[int, dict[int, Decimal]]:
    """{layer: {expert: share of the layer's recent tokens}}, each share rounded to 4 places."""
    totals: dict[int, int] = {}
    for use in uses:
        totals[use.layer] = totals.get(use.layer, 0) + use.recent_tokens
    rates: dict[int, dict[int, Decimal]] = {}
    for use in uses:
        if totals[use.layer]:
            share = Decimal(use.recent_tokens) / totals[use.layer]
            rates.setdefault(use.layer, {})[use.expert] = share.quantize(Decimal("0.0001"))
    return rates


def silent_experts(uses: list[ExpertUse]) -> list[ExpertUse]:
    """Experts used in the baseline and not in the recent window, on layers that still had traffic."""
    active_layers = {u.layer for u in uses if u.recent_tokens}
    return [u for u in uses if u.baseline_tokens and not u.recent_tokens and u.layer in active_layers]


def evaluate_health(contracts: Sequence[Contract], *, now: datetime | None = None) -> dict[str, int]:
    """Open, keep or resolve route-jitter and silent-expert alerts of the contracts (two queries for all);
    returns how many are open per contract."""
    now = now or timezone.now()
    spreads = route_jitter_ms(contracts, now)
    uses = expert_use(contracts, now)
    open_counts = {}
    for contract in contracts:
        jitter: dict[tuple[str, str], Condition] = {}
        buckets, spread = spreads.get(contract.code, (0, Decimal(0)))
        if buckets >= JITTER_MIN_BUCKETS and spread > JITTER_LIMIT_MS:
            jitter[("route-jitter", "e2e")] = Condition(
                severity=SlaAlert.Severity.TICKET,
                measured={"p95_stddev_ms": str(spread), "limit_ms": str(JITTER_LIMIT_MS), "buckets": buckets},
            )
        silent = {
            ("expert-silent", f"layer {u.layer} expert {u.expert}"): Condition(
                severity=SlaAlert.Severity.TICKET,
                measured={"layer": u.layer, "expert": u.expert, "baseline_tokens": u.baseline_tokens},
            )
            for u in silent_experts(uses[contract.code])
        }
        open_counts[contract.code] = reconcile(contract, SlaAlert.Kind.ROUTE_JITTER, jitter, now) + reconcile(
            contract, SlaAlert.Kind.EXPERT_SILENT, silent, now
        )
    return open_counts
