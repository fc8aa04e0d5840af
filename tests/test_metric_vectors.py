"""One set of hand-computed custom-metric vectors (tests/metric_vectors.json) pins both implementations of
the metrics to the same quantities: the platform's (the rating query in ClickHouse over records sent
through ingest: `billing.selectors.usage_by_contract`) and the standalone verifier's own
(`treemeter_verify.metrics`, which depends on nothing of the platform). Records, expressions,
aggregations, ties, empty periods, x / 0, comparisons and the engine's 18-place decimals of Float64
values; and the verifier's copy of that conversion against ClickHouse's ``toDecimal256(x, 18)`` itself
over doubles of every magnitude."""

from __future__ import annotations

import json
import random
import struct
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from billing.selectors import ContractMeter, usage_by_contract
from clickhouse_store import query
from tests.billing.usage import send_each
from tests.factories import ContractFactory
from treemeter_records import new_record_id
from treemeter_records.timeutil import unix_nanos
from treemeter_verify.metrics import billable_records, decimal18, period_quantity

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
_FILE = json.loads((Path(__file__).parent / "metric_vectors.json").read_text())
VECTORS: list[dict[str, Any]] = _FILE["vectors"]
START, END = (datetime.fromisoformat(x) for x in _FILE["period"])


def test_the_vectors_cover_every_aggregation_and_the_named_cases() -> None:
    expressions = " ".join(v["expression"] for v in VECTORS)
    for aggregation in ("period_max(", "unique_count(", "latest(", "time_weighted_sum(", "sum("):
        assert aggregation in expressions
    names = " ".join(v["name"] for v in VECTORS)
    for case in (
        "tie",
        "empty period",
        "division by zero",
        "comparisons",
        "18-place decimal",
        "price change",
    ):
        assert case in names


def _sent(vector: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """The vector's records, sent through ingest for a new contract; their record ids ordered by `id`."""
    contract = ContractFactory.create()
    base = new_record_id()[:24]
    fields = [
        {
            "record_id": f"{base}{record['id']:012x}",
            "start_ns": unix_nanos(datetime.fromisoformat(record["start"])),
            **{k: v for k, v in record.items() if k not in ("id", "start")},
        }
        for record in vector["records"]
    ]
    return contract, send_each(contract, fields)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_platform_and_verifier_measure_each_vector_to_its_quantity(vector: dict[str, Any]) -> None:
    contract, records = _sent(vector)
    bounds = tuple(datetime.fromisoformat(b) for b in vector.get("bounds", []))
    meter = ContractMeter(contract.tenant.code, contract.code, {"m": vector["expression"]}, bounds)

    platform = usage_by_contract([meter], START, END)[contract.code]
    start_ns, end_ns = unix_nanos(START), unix_nanos(END)
    billable = billable_records(records, contract.tenant.code, contract.code, start_ns, end_ns)
    verifier, segments = period_quantity(
        vector["expression"], billable, start_ns, end_ns, [unix_nanos(b) for b in bounds]
    )

    assert platform.quantities["m"] == verifier == Decimal(vector["quantity"])
    if bounds:
        expected = [Decimal(q) for q in vector["segments"]]
        assert [s.quantities["m"] for s in platform.segments] == segments == expected


def _units(text: str) -> int:
    """A Decimal256(76, 18) as the engine prints it, in units of 1e-18."""
    whole, _, fraction = text.lstrip("-").partition(".")
    units = int(whole + fraction.ljust(18, "0"))
    return -units if text.startswith("-") else units


def test_the_verifiers_decimal_is_the_engines_to_decimal256() -> None:
    """Doubles of every magnitude (up to the ±5.7e58 a Decimal256 of 18 places holds) and of random bit
    patterns, through ClickHouse's own toDecimal256(x, 18): the verifier gives the same decimal for each.
    The engine multiplies by 1e18 in doubles, truncates toward zero below 2**63, and above takes the
    integer through 80-bit long double arithmetic: 100.0 becomes 100.000000000000000003."""
    rng = random.Random(21)
    doubles = [0.1, -0.1, 2 / 3, 1.5e-18, -1.5e-18, 100.0, 1e16, 123456.789, 3.5e20, 1e40, -5.7e58]
    doubles += [rng.choice((1, -1)) * rng.random() * 10 ** rng.uniform(-25, 58.7) for _ in range(3000)]
    doubles += [float(rng.randint(0, 10**7)) * rng.choice((1, 0.5, 0.001, 1 / 3)) for _ in range(1000)]
    for _ in range(1000):
        x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if x == x and abs(x) < 5.7e58:
            doubles.append(x)
    rows = query.select(
        "SELECT toString(toDecimal256(x, 18)) FROM (SELECT arrayJoin({xs:Array(Float64)}) AS x)",
        {"xs": doubles},
    )
    engine = [_units(text) for (text,) in rows]

    assert engine[:6] == [10**17, -(10**17), 666666666666666624, 1, -1, 100 * 10**18 + 3]
    assert [decimal18(x) for x in doubles] == engine
