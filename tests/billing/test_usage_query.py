"""The rating aggregate: every contract, dimension and custom metric of a run in one GROUP BY."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.selectors import ContractMeter, rated_contracts, usage_by_contract
from clickhouse_store.queries.billing import usage_sql
from common.periods import month_bounds
from tests.billing.usage import at, send, send_each
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]


def test_one_query_measures_each_contract_with_its_own_metrics() -> None:
    a, b, c, d = (ContractFactory.create() for _ in range(4))
    for contract, count in ((a, 1), (b, 2), (c, 3), (d, 4)):
        send(contract, count, at(2026, 11, 3))
    send(a, 5, at(2026, 10, 31))  # October: outside the period
    send(b, 1, at(2026, 11, 3), status="error")  # counted as a record, not billed
    meters = [
        ContractMeter(a.tenant.code, a.code, {"hop_count": "hops"}),
        ContractMeter(b.tenant.code, b.code, {"double_in": "tokens_in * 2", "hop_count": "hops"}),
        ContractMeter(c.tenant.code, c.code, {"hops_again": "hops"}),
        ContractMeter(d.tenant.code, d.code, {}),
        ContractMeter("tenant-x", "never-sent", {}),
    ]

    usage = usage_by_contract(meters, *month_bounds("2026-11"))

    sql, _, columns, _ = usage_sql(rated_contracts(meters), *month_bounds("2026-11"))
    assert sql.count("SELECT") == 1 and columns == {"hops": 0, "tokens_in * 2": 1}  # shared expressions
    assert {k: (u.record_count, u.quantities["requests"]) for k, u in usage.items()} == {
        a.code: (1, Decimal(1)),
        b.code: (3, Decimal(2)),
        c.code: (3, Decimal(3)),
        d.code: (4, Decimal(4)),
        "never-sent": (0, Decimal(0)),
    }
    assert usage[a.code].quantities["hop_count"] == Decimal(5)
    assert (usage[b.code].quantities["double_in"], usage[b.code].quantities["hop_count"]) == (
        Decimal(400),
        Decimal(10),
    )
    assert usage[c.code].quantities["hops_again"] == Decimal(15)
    assert "hop_count" not in usage[d.code].quantities
    assert usage[d.code].quantities["l3_seconds"] == Decimal("0.36")  # 4 × 90,000 µs


def test_metric_sums_are_exact_whatever_the_order_of_addition() -> None:
    """Per-record values 1e16, ten times 1, then -1e16, in one batch (one part, read in key order):
    a Float64 sum adds 1e16 + 1 first and loses every 1; the period's sum is exactly 10."""
    contract = ContractFactory.create()
    swings = [(2, 1), *[(1, 1)] * 10, (1, 2)]
    send_each(
        contract,
        [
            {"start_ns": at(2026, 11, 3) + k, "tokens_in": i, "tokens_out": o, "prefix_cache_hit_tokens": 0}
            for k, (i, o) in enumerate(swings)
        ],
    )
    expression = "if(tokens_in - tokens_out, (tokens_in - tokens_out) * 10000000000000000, requests)"
    meter = ContractMeter(contract.tenant.code, contract.code, {"swing": expression})

    usage = usage_by_contract([meter], *month_bounds("2026-11"))

    assert usage[contract.code].quantities["swing"] == Decimal("10.000000")
