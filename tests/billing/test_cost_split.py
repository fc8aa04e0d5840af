"""A request's cost split per hop, layer and expert: hand-computed figures, the remainder rule, and the
parts always adding up to the total (hypothesis)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from billing.cost_split import REQUEST_UNIT, Rates, allocate, split_request_cost

D = Decimal
# L3 at 36.00 an hour: 0.00000001 a µs; L1 and L2 at 3.60: 0.000000001 a µs.
RATES = Rates(l3_per_hour=D("36.00"), l1_l2_per_hour=D("3.60"))
RECORD: dict[str, Any] = {
    "hops": [
        {"layer": "L1", "node": "router-1", "latency_us": 400},
        {"layer": "L2", "node": "cache-1", "latency_us": 2_000},
        {"layer": "L3", "node": "gpu-1", "latency_us": 90_000},
        {"layer": "L2", "node": "cache-1", "latency_us": 1_000},
        {"layer": "L1", "node": "router-1", "latency_us": 100},
    ],
    "experts": [
        {"layer": 0, "expert": 1, "tokens": 150},
        {"layer": 0, "expert": 4, "tokens": 90},
        {"layer": 1, "expert": 2, "tokens": 120},
        {"layer": 1, "expert": 7, "tokens": 120},
    ],
}


def parts(split: list[Any]) -> dict[str, Decimal]:
    return {p.name: p.amount for p in split}


def test_a_request_split_by_hop_layer_and_expert() -> None:
    split = split_request_cost(RECORD, RATES)

    assert split.total == D("0.000903500")  # 0.0000004 + 0.000002 + 0.0009 + 0.000001 + 0.0000001
    assert parts(split.hops) == {
        "1 L1 router-1": D("0.000000400"),
        "2 L2 cache-1": D("0.000002000"),
        "3 L3 gpu-1": D("0.000900000"),
        "4 L2 cache-1": D("0.000001000"),
        "5 L1 router-1": D("0.000000100"),
    }
    assert parts(split.layers) == {"L1": D("0.000000500"), "L2": D("0.000003000"), "L3": D("0.000900000")}
    # L3: each layer weighs 1/2; in layer 0, 150/240 and 90/240; in layer 1, 120/240 each:
    # 0.0009 × 0.3125, × 0.1875, × 0.25, × 0.25. L2: 0.000003 in four equal lookups.
    assert parts(split.experts) == {
        "L3 layer 0 expert 1": D("0.000281250"),
        "L3 layer 0 expert 4": D("0.000168750"),
        "L3 layer 1 expert 2": D("0.000225000"),
        "L3 layer 1 expert 7": D("0.000225000"),
        "L2 layer 0 expert 1": D("0.000000750"),
        "L2 layer 0 expert 4": D("0.000000750"),
        "L2 layer 1 expert 2": D("0.000000750"),
        "L2 layer 1 expert 7": D("0.000000750"),
    }
    assert split.unattributed == 0


def test_the_units_left_over_go_to_the_largest_remainders_earlier_first() -> None:
    micro = D("0.000001")
    assert allocate(micro * 1000, [D(1)] * 3, micro) == [D("0.000334"), D("0.000333"), D("0.000333")]
    # 0.01 as 0.2 / 0.3 / 0.5 of it at cents: 0.002, 0.003, 0.005 → floors 0, 0, 0; the one cent goes to
    # the largest remainder (0.5 of a cent).
    assert allocate(D("0.01"), [D("0.2"), D("0.3"), D("0.5")], D("0.01")) == [D(0), D(0), D("0.01")]


def test_a_request_without_experts_keeps_its_cache_and_expert_cost_unattributed() -> None:
    split = split_request_cost({**RECORD, "experts": []}, RATES)

    assert split.experts == [] and split.unattributed == D("0.000903000")  # L2 0.000003 + L3 0.0009


hops = st.lists(
    st.fixed_dictionaries(
        {
            "layer": st.sampled_from(["L1", "L2", "L3"]),
            "node": st.sampled_from(["r", "c", "g"]),
            "latency_us": st.integers(0, 2**32 - 1),
        }
    ),
    min_size=1,
    max_size=8,
)
experts = st.lists(
    st.fixed_dictionaries(
        {"layer": st.integers(0, 3), "expert": st.integers(0, 63), "tokens": st.integers(1, 2**32 - 1)}
    ),
    max_size=12,
    unique_by=lambda e: (e["layer"], e["expert"]),
)
money = st.decimals(min_value=0, max_value=10_000, places=4)


@settings(max_examples=300, deadline=None)
@given(hops=hops, experts=experts, l3=money, l1_l2=money)
def test_the_parts_add_up_to_the_total_exactly(
    hops: list[dict[str, Any]], experts: list[dict[str, int]], l3: Decimal, l1_l2: Decimal
) -> None:
    split = split_request_cost({"hops": hops, "experts": experts}, Rates(l3, l1_l2))

    assert sum((p.amount for p in split.hops), D(0)) == split.total
    assert sum((p.amount for p in split.layers), D(0)) == split.total
    layers = parts(split.layers)
    assert sum((p.amount for p in split.experts), D(0)) + split.unattributed == layers["L2"] + layers["L3"]
    exact = [D(h["latency_us"]) * Rates(l3, l1_l2).per_us(h["layer"]) for h in hops]
    whole = sum(exact, D(0))
    for part, x in zip(split.hops, exact, strict=True):  # within one unit of its exact share
        assert whole == 0 or abs(part.amount - split.total * x / whole) < REQUEST_UNIT
