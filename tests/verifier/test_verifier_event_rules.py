"""The verifier's acceptance rules of business events (treemeter_verify.events) against the platform's SQL on
the real engine: one contract's records through the real ingest (latencies, statuses, outcome objects of
numbers, numeric strings, bools, nulls, nested values and missing keys), then, rule by rule, the accepted
flag `clickhouse_store.queries.billing.event_records` gives each record and the one the verifier computes
from the same signed lines must agree. Then the engine's pieces the verifier copies, pinned one by one:
`outcome_<key>` over the values and strings an outcome can hold, and quantileExact's index; and the check
in the verifier's run, on a real export whose manifest is given an event line."""

from __future__ import annotations

import json
import math
import random
import struct
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.services import finalize_invoice
from clickhouse_store import query
from clickhouse_store.queries.billing import event_records
from clickhouse_store.queries.metric_sql import metric_sql
from contracts.models import ContractPrice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from pricing.expressions import parse_metric
from tests.billing.usage import ingest
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ledger.support import member_client, november_invoice, pinned_keys, send
from treemeter_verify import verify_export
from treemeter_verify.check import read_export
from treemeter_verify.events import outcome_number, parse_rule, period_figures, quantile_exact, rule_holds
from treemeter_verify.records import load_record

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]

START, END = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
DAY = int(datetime(2026, 11, 10, tzinfo=UTC).timestamp()) * 10**9
RULED, UNRULED = "model-ruled", "model-free"  # the rule under test is the first model's; the second has none

# Outcome objects as records carry them; the engine reads `outcome_f1` from each as the comment says.
OUTCOMES: list[dict[str, Any] | None] = [
    {"f1": "0.95"},  # a decimal string: 0.95
    {"f1": "0.91", "n": 3},
    {"f1": "0.92"},
    {"f1": 1},  # an integer: 1
    {"f1": 0},
    {"f1": -7, "n": -2},
    {"f1": 9007199254740993},  # rounded to the nearest double, 2**53
    {"f1": True},  # a bool: 0, true as well
    {"f1": False},
    {"f1": None},  # null: 0
    {},  # a missing key: 0
    None,  # no outcome: 0
    {"f1": {"value": 1}},  # an object: 0
    {"f1": [1, 2]},  # an array: 0
    {"F1": "0.99"},  # another key (keys are matched exactly, and the rule's key is lower case)
    {"f1": "nan"},  # NaN: compares false, is not 0
    {"f1": "-inf"},
    {"f1": "Infinity"},
    {"f1": "nan(123)"},
    {"f1": " 0.95"},  # white space: 0
    {"f1": "0.95 "},
    {"f1": "1_000"},  # underscores: 0
    {"f1": "0x10"},  # hex: 0
    {"f1": "+.93"},
    {"f1": "5."},
    {"f1": "1e-1"},
    {"f1": "9.3E-1"},
    {"f1": ""},
    {"f1": "abc"},
    {"f1": "0.95abc"},
    {"f1": "1e400"},  # inf
    {"f1": "٣"},  # a non-ASCII digit: 0
    {"nested": {"f1": 1}},  # only the top level: 0
    {"f1": "0.1000000000000000055511151231257827021181583404541015625"},
]
STATUSES = ("ok", "ok", "ok", "error", "ok", "timeout", "ok")

RULES = [
    "outcome_f1 >= 0.92",
    "outcome_F1 >= 0.92",
    "outcome_f1 > 0",
    "outcome_f1 = 0",
    "outcome_f1 != outcome_f1",  # NaN only
    "outcome_f1 < 1e300",
    "-outcome_f1 < -0.9",
    "outcome_f1 - 0.05 * 2 >= 0.8",
    "outcome_f1 * 2 = 1.9",
    "outcome_n * 2 >= 6 or outcome_n < -1",
    "outcome_missing = 0",
    "outcome_f1 / outcome_n > 0.3",  # x / 0 is 0
    "max(outcome_f1, 0.95) >= 0.9",  # greatest(NaN, 0.95) is 0.95, greatest(0.95, NaN) NaN
    "max(0.95, outcome_f1) >= 0.9",
    "min(outcome_f1, 2) > 0.5",
    "min(2, outcome_f1) > 0.5",
    "if(outcome_f1 > 0.9, tokens_in, 0) > 50",
    "if(outcome_f1, 1, 0)",
    "outcome_f1 and latency_ms < 400",
    "outcome_f1 or 0",
    "latency_ms <= p50_latency_ms",
    "latency_ms >= p99_latency_ms",
    "latency_ms < p99_latency_ms and error_rate < 0.5",
    "p50_latency_ms * 2 > p99_latency_ms",
    "error_rate * 41 = 14",  # 14 of the 41 records of the period fail
    "error_rate > 0.4 or tokens_out > 15",
    "tokens_in / (tokens_out - 20) > 1",
    "cache_hit_ratio > 0.5 and l3_seconds < 0.1",
    "hops >= 5 and l1_latency_us + l2_latency_us > 3000",
    "latency_ms / 1000 > 0.2",
    "requests",
]


def _records() -> list[dict[str, Any]]:
    """Field overrides: a record per outcome, ruled, with several latencies and statuses, its event id one
    of seven; the unruled model's; records without an event id (in the period's figures, not events)."""
    overrides: list[dict[str, Any]] = []
    for k, outcome in enumerate(OUTCOMES):
        overrides.append(
            {
                "model_id": RULED,
                "client_request_id": f"ev-{k % 7}",
                "status": STATUSES[k % len(STATUSES)],
                "outcome": outcome,
                "start_ns": DAY + k * 10**9,
                "end_ns": DAY + k * 10**9 + 40_000_000 + (k * 7919 % 23) * 13_579_011,
                "tokens_in": 30 + 5 * k,
                "tokens_out": 10 + k % 20,
                "expert_cache_hits": k % 4,
            }
        )
    for k in range(4):
        overrides.append(
            {
                "model_id": UNRULED,
                "client_request_id": f"ev-{k}",
                "status": ("ok", "error")[k % 2],
                "start_ns": DAY + (100 + k) * 10**9,
                "end_ns": DAY + (100 + k) * 10**9 + 250_000_000 + k,
            }
        )
    for k in range(3):
        overrides.append(
            {
                "client_request_id": "",
                "status": ("error", "ok", "error")[k],
                "start_ns": DAY + (200 + k) * 10**9,
                "end_ns": DAY + (200 + k) * 10**9 + 900_000_000 * (k + 1),
            }
        )
    return overrides


def test_the_verifier_accepts_exactly_the_records_the_platform_accepts() -> None:
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    sent = [agent.record(contract, **fields) for fields in _records()]
    # Another period's record: in neither the events nor the period's figures.
    sent.append(agent.record(contract, start_ns=int(datetime(2026, 10, 31, tzinfo=UTC).timestamp()) * 10**9))
    ingest(agent, sent)
    # The records as the export carries them: the signed canonical lines.
    records = [load_record(line) for line in agent.batch(sent).lines]
    by_id = {r["record_id"]: r for r in records}
    in_period = [r for r in records if r["start_ns"] >= DAY]
    figures = period_figures(in_period)
    assert len(in_period) == 41
    assert sum(r["status"] != "ok" for r in in_period) == 14

    disagreements, accepted = [], 0
    for rule in RULES:
        rows = event_records(
            contract.tenant.code, contract.code, START, END, {RULED: parse_metric(rule, rule=True)}
        )
        assert len(rows) == len(OUTCOMES) + 4  # every record with an event id, any status
        value = parse_rule(rule)
        for row in rows:
            record = by_id[row.record_id]
            ours = rule_holds(value, record, figures) if row.model_id == RULED else True
            accepted += ours
            if ours != row.accepted:
                disagreements.append((rule, record["outcome"], record["end_ns"] - record["start_ns"], ours))
    assert disagreements == []
    # Not a vacuous agreement: the rules accept some records and refuse others.
    assert 0 < accepted < len(RULES) * (len(OUTCOMES) + 4)


def _engine_outcome_values(documents: list[str]) -> list[float]:
    """`outcome_k` for each outcome text, by the platform's own SQL (`metric_sql`) on the engine."""
    rendered = metric_sql(parse_metric("outcome_k", rule=True), "r")
    rows = query.select(
        f"SELECT {rendered.sql} FROM (SELECT arrayJoin({{documents:Array(String)}}) AS outcome)",
        {**rendered.params, "documents": documents},
    )
    return [row[0] for row in rows]


def _same(a: float, b: float) -> bool:
    """Equal to the bit, or both NaN (of either sign)."""
    return (math.isnan(a) and math.isnan(b)) or struct.pack("<d", a) == struct.pack("<d", b)


STRINGS = [
    *("1.5", " 1.5", "1.5 ", "\t1", "1\n", "+1", "-1", "--1", "+-1", "1e5", "1E+5", "1e-5", "1e", "1e+"),
    *("e5", ".5", "5.", "-.5", ".", "", "  ", "00012", "0x1A", "0b101", "1_000", "1,5", "1..5", "1.5abc"),
    *("inf", "-inf", "+INF", "Infinity", "iNfInItY", "infinit", "infx", "info", "nan", "-nan", "NaN"),
    *("nan(123)", "nan()", "-nan(ind)", "nan(x_Y9)", "nan(", "nan(a b)", "nan(-)", "nanx", "+nan"),
    *("1e308", "1e309", "-1e309", "1e-400", "4.9e-324", "2.4703282292062327e-324", "2.2250738585072011e-308"),
    *("9007199254740993", "9007199254740992.5", "0.30000000000000004", "1e23", "8.589973e9"),
    *("1.00000000000000011102230246251565404236316680908203125", "1" + "0" * 400, "0." + "0" * 400 + "1"),
    *("٣", "１", "1e٣", "1\x005", "-0", "-0.0e-0", "0e99999999999999999999", "1e99999999999999999999"),
]


def _fuzzed(count: int) -> list[str]:
    """Short strings of the characters numbers are made of, and long decimals with exponents."""
    rng = random.Random(20261110)
    alphabet = "0123456789.eE+-naifNIF() x_"
    out = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(count)]
    for _ in range(count):
        whole = str(rng.randint(0, 10 ** rng.randint(1, 25)))
        fraction = rng.choice(["", ".", f".{rng.randint(0, 10 ** rng.randint(1, 25))}"])
        exponent = rng.choice(["", f"e{rng.randint(-330, 330)}", f"E+{rng.randint(0, 30)}"])
        out.append(rng.choice(["", "-", "+"]) + whole + fraction + exponent)
    return out


def test_outcome_values_are_read_as_the_engine_reads_them() -> None:
    values: list[Any] = [*STRINGS, *_fuzzed(1500)]
    values += [0, 1, -1, 2**63 - 1, -(2**63), 2**53 + 1, True, False, None, {"a": 1}, [1], []]
    documents = [json.dumps({"k": v}) for v in values]
    documents += ["{}", "", json.dumps({"K": 1}), json.dumps({"nested": {"k": 1}}), json.dumps({"k2": 1})]
    engine = _engine_outcome_values(documents)
    ours = [outcome_number(json.loads(d) if d else None, "k") for d in documents]
    assert [(d, a, b) for d, a, b in zip(documents, engine, ours, strict=True) if not _same(a, b)] == []
    # What the corner cases come to (the engine's answers, pinned): a bool is 0, even true.
    assert (outcome_number({"k": True}, "k"), outcome_number({"k": " 1.5"}, "k")) == (0.0, 0.0)
    assert (
        math.isnan(outcome_number({"k": "nan(1)"}, "k")) and outcome_number({"k": "1e400"}, "k") == math.inf
    )


def test_quantile_exact_takes_the_engines_element() -> None:
    rng = random.Random(7)
    for size in range(1, 230):
        values = [float(rng.choice([rng.randint(0, 40), rng.randint(0, 10**6) / 1000])) for _ in range(size)]
        [(p50, p99)] = query.select(
            "SELECT quantileExact(0.5)(x), quantileExact(0.99)(x) "
            "FROM (SELECT arrayJoin({xs:Array(Float64)}) AS x)",
            {"xs": values},
        )
        assert (quantile_exact(values, 0.5), quantile_exact(values, 0.99)) == (p50, p99), size
    # The index is level × count truncated, of the values sorted: of 100, the 51st and the 100th.
    hundred = [float(k) for k in range(100, 0, -1)]
    assert (quantile_exact(hundred, 0.5), quantile_exact(hundred, 0.99)) == (51.0, 100.0)
    assert quantile_exact([3.0, 1.0], 0.5) == 3.0 and quantile_exact([5.0], 0.99) == 5.0


def _verdicts(
    manifest: dict[str, Any], lines: Sequence[bytes], agent: SigningAgent
) -> dict[str, tuple[bool, str]]:
    return {v.check: (v.ok, v.detail) for v in verify_export(manifest, lines, pinned_keys(agent)).verdicts}


def test_an_export_with_event_lines_is_checked_from_its_own_records(client: Client) -> None:
    """The hook in the verifier's run (check.py): a real export of a finalised invoice, its manifest given
    an event unit, its price and its line as the platform states them; the line is checked from the
    export's record lines, not taken for an unknown dimension, and a tampered one is named."""
    contract = ContractFactory.create()
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=Decimal("0.01"))
    agent = signing_agent(contract)
    calls = [("ev-1", "ok", {"f1": "0.95"}), ("ev-2", "ok", {"f1": "0.5"}), ("ev-3", "error", None)]
    sent = [
        agent.record(contract, client_request_id=event, model_id=RULED, status=status, outcome=outcome)
        for event, status, outcome in calls
    ]
    send(client, agent, sent)
    invoice = finalize_invoice(november_invoice(contract))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    body = member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice.pk}/export").content
    manifest, lines = read_export(body)
    unit = "review_event"
    manifest["invoice"]["events"] = {
        unit: {"package": contract.package.code, "required": [RULED], "rules": {RULED: "outcome_f1 >= 0.92"}}
    }
    manifest["prices"][unit] = {"charge_model": "per_unit", "properties": {"unit_price": "12.50"}}
    billed = [{"event_id": "ev-1", "records": [sent[0]["record_id"]]}]
    line = {"kind": "usage", "dimension": unit, "quantity": "1", "amount": "12.50", "events": billed}
    manifest["invoice"]["lines"].append(line)

    verdicts = _verdicts(manifest, lines, agent)
    assert verdicts[f"event line {unit}"] == (True, "1 event × 12.50 = 12.50 CNY")
    assert f"line usage {unit}" not in verdicts  # not "neither a built-in dimension nor a metric"
    line["events"] = [*billed, {"event_id": "ev-2", "records": [sent[1]["record_id"]]}]
    line["quantity"] = "2"
    assert _verdicts(manifest, lines, agent)[f"event line {unit}"] == (
        False,
        "quantity 2 but the records give 1 event; event ev-2 billed but no ok record of capability model "
        f"{RULED} meets its acceptance rule",
    )
