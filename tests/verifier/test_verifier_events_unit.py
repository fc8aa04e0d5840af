"""treemeter_verify.events on hand-built invoices and records: which events a unit's records make and how
each is classified (billable, partial, failed acceptance; a retry's superseded attempt, another package's
or contract's or period's records left out), and the event line's verdict when its quantity, its events,
their records or its amount are tampered with, also per price version."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from treemeter_verify.credits import Finding
from treemeter_verify.events import (
    BILLABLE,
    FAILED_ACCEPTANCE,
    PARTIAL,
    classify_events,
    event_findings,
    period_figures,
)

TENANT, CONTRACT, CURRENCY = "acme-legal", "ctr-2026-007", "CNY"
UNIT, PACKAGE = "contract_review_event", "contract-review"
OCR, CLAUSES, SUMMARY = "ocr-v1", "clauses-v1", "summary-v1"
CHECK = f"event line {UNIT}"


def _ns(day: int, month: int = 11) -> int:
    return int(datetime(2026, month, day, tzinfo=UTC).timestamp()) * 10**9


_numbers = itertools.count(1)


def record(event: str, model: str, status: str = "ok", **fields: Any) -> dict[str, Any]:
    """A record of the contract under the package, a second after the one made before."""
    number = next(_numbers)
    start = fields.pop("start_ns", _ns(10) + number * 10**9)
    return {
        "record_id": f"01936f4e-8a2b-7c3d-9e4f-{number:012x}",
        "tenant": TENANT,
        "contract": CONTRACT,
        "package": PACKAGE,
        "client_request_id": event,
        "model_id": model,
        "status": status,
        "start_ns": start,
        "end_ns": start + 200_000_000,
        "outcome": None,
        **fields,
    }


def f1(value: str) -> dict[str, Any]:
    return {"outcome": {"f1": value}}


TERMS = {"package": PACKAGE, "required": [CLAUSES, OCR], "rules": {CLAUSES: "outcome_f1 >= 0.92"}}
PRICE = {"charge_model": "per_unit", "properties": {"unit_price": "12.50"}, "included_quantity": "0"}


def scenario() -> tuple[list[dict[str, Any]], set[str], str]:
    """The records of one month, the ids of the attempts retries superseded, and ev-5's superseded one:
    ev-1, ev-4 and ev-5 are billable."""
    attempt = record("ev-5", CLAUSES, **f1("0.95"))
    lost = record("ev-9", CLAUSES, **f1("0.99"))
    records = [
        *(record("ev-1", OCR), record("ev-1", CLAUSES, **f1("0.95"))),
        *(record("ev-2", OCR), record("ev-2", CLAUSES, **f1("0.71"))),  # fails its rule
        *(record("ev-3", OCR), record("ev-3", CLAUSES, "error")),  # never served
        # a first try that fails the rule, a retry that meets it, an optional model that failed
        *(record("ev-4", OCR), record("ev-4", CLAUSES, **f1("0.60")), record("ev-4", CLAUSES, **f1("0.93"))),
        record("ev-4", SUMMARY, "error"),
        # an attempt a retry superseded (no longer part of the event) and the retry
        *(record("ev-5", OCR), attempt, record("ev-5", CLAUSES, **f1("0.96"))),
        record("ev-7", OCR),  # only OCR
        *(record("ev-9", OCR), lost),  # its only clause extraction was superseded
        # not records of the unit's events
        *(record("ev-6", OCR, package="logistics"), record("ev-6", CLAUSES, package="logistics", **f1("1"))),
        record("", OCR),
        *(
            record("ev-8", OCR, contract="ctr-other"),
            record("ev-8", CLAUSES, contract="ctr-other", **f1("1")),
        ),
        *(
            record("ev-10", OCR, start_ns=_ns(31, 10)),
            record("ev-10", CLAUSES, start_ns=_ns(31, 10), **f1("1")),
        ),
    ]
    return records, {attempt["record_id"], lost["record_id"]}, attempt["record_id"]


def invoice(*lines: dict[str, Any], terms: dict[str, Any] = TERMS) -> dict[str, Any]:
    return {
        "tenant": TENANT,
        "contract": CONTRACT,
        "currency": CURRENCY,
        "period_start_ns": _ns(1),
        "period_end_ns": _ns(1, 12),
        "events": {UNIT: terms},
        "lines": list(lines),
    }


def billed(records: list[dict[str, Any]], superseded: set[str], *events: str) -> list[dict[str, Any]]:
    """The events as the line lists them: each with the ids of all its records but superseded ones."""
    return [
        {
            "event_id": event,
            "records": sorted(
                r["record_id"]
                for r in records
                if r["client_request_id"] == event
                and r["package"] == PACKAGE
                and r["contract"] == CONTRACT
                and r["record_id"] not in superseded
            ),
        }
        for event in events
    ]


def line(events: list[dict[str, Any]], quantity: str | None = None, amount: str = "37.50") -> dict[str, Any]:
    return {
        "kind": "usage",
        "dimension": UNIT,
        "quantity": quantity if quantity is not None else str(len(events)),
        "unit_price": "12.50",
        "amount": amount,
        "events": events,
    }


def verdict(
    lines: list[dict[str, Any]],
    records: list[dict[str, Any]],
    superseded: set[str],
    prices: dict[str, Any] | None = None,
    terms: dict[str, Any] = TERMS,
) -> Finding:
    [finding] = event_findings(invoice(*lines, terms=terms), prices or {UNIT: PRICE}, records, superseded)
    assert finding.check == CHECK
    return finding


def test_events_are_classified_as_the_platform_classifies_them() -> None:
    records, superseded, attempt = scenario()
    considered = [
        r
        for r in records
        if r["package"] == PACKAGE
        and r["contract"] == CONTRACT
        and r["client_request_id"]
        and r["start_ns"] >= _ns(1)
        and r["record_id"] not in superseded
    ]
    events = classify_events(TERMS, considered, period_figures(considered))
    assert {k: (e.status, e.missing, e.not_accepted) for k, e in events.items()} == {
        "ev-1": (BILLABLE, [], []),
        "ev-2": (FAILED_ACCEPTANCE, [], [CLAUSES]),
        "ev-3": (PARTIAL, [CLAUSES], []),
        "ev-4": (BILLABLE, [], []),
        "ev-5": (BILLABLE, [], []),
        "ev-7": (PARTIAL, [CLAUSES], []),
        "ev-9": (PARTIAL, [CLAUSES], []),
    }
    assert len(events["ev-4"].record_ids) == 4  # the failed optional summary too
    assert attempt not in events["ev-5"].record_ids


def test_a_line_billing_exactly_the_billable_events_passes() -> None:
    records, superseded, _ = scenario()
    events = billed(records, superseded, "ev-1", "ev-4", "ev-5")
    assert verdict([line(events)], records, superseded) == Finding(CHECK, [], "3 events × 12.50 = 37.50 CNY")


def test_a_tampered_quantity_is_named() -> None:
    records, superseded, _ = scenario()
    events = billed(records, superseded, "ev-1", "ev-4", "ev-5")
    assert verdict([line(events, quantity="4")], records, superseded).problems == [
        "quantity 4 but the records give 3 events"
    ]


def test_events_listed_that_are_not_billable_are_named_with_why() -> None:
    records, superseded, _ = scenario()
    events = billed(records, superseded, "ev-1", "ev-2", "ev-3", "ev-4", "ev-5", "ev-6", "ev-9")
    problems = verdict([line(events, amount="87.50")], records, superseded).problems
    assert problems == [
        "quantity 7 but the records give 3 events",
        "event ev-2 billed but no ok record of capability model clauses-v1 meets its acceptance rule",
        "event ev-3 billed but capability model clauses-v1 has no ok record",
        "event ev-6 billed but the period has no record of it under the unit's package",  # another package's
        "event ev-9 billed but capability model clauses-v1 has no ok record",  # its record was superseded
        "amount 87.50 CNY but the pinned terms give 37.50 (off by 50.00 CNY)",
    ]


def test_a_superseded_attempt_is_no_record_of_its_event_until_it_is_not_superseded() -> None:
    records, superseded, attempt = scenario()
    events = billed(records, set(), "ev-1", "ev-4", "ev-5")  # ev-5 with the superseded attempt
    [problem] = verdict([line(events)], records, superseded).problems or []
    assert problem == f"event ev-5 lists record {attempt}, not one of its records"
    # Without the retry's claim, the attempt is a record of ev-5 and ev-9 is billable too.
    four = billed(records, set(), "ev-1", "ev-4", "ev-5", "ev-9")
    assert verdict([line(four, amount="50.00")], records, set()) == Finding(
        CHECK, [], "4 events × 12.50 = 50.00 CNY"
    )


def test_a_billable_event_left_out_is_named() -> None:
    records, superseded, _ = scenario()
    events = billed(records, superseded, "ev-1", "ev-4")
    assert verdict([line(events, amount="25.00")], records, superseded).problems == [
        "quantity 2 but the records give 3 events",
        "event ev-5 is billable but not billed",
        "amount 25.00 CNY but the pinned terms give 37.50 (off by -12.50 CNY)",
    ]


def test_a_wrong_record_list_is_named() -> None:
    records, superseded, _ = scenario()
    events = billed(records, superseded, "ev-1", "ev-4", "ev-5")
    summary = next(r["record_id"] for r in records if r["model_id"] == SUMMARY)
    other = next(r["record_id"] for r in records if r["client_request_id"] == "ev-6")
    events[1]["records"] = [x for x in events[1]["records"] if x != summary] + [other]
    events[0]["records"] = events[0]["records"] * 2
    assert verdict([line(events)], records, superseded).problems == [
        "event ev-1 lists a record more than once",
        f"event ev-4 lists record {other}, not one of its records",
        f"event ev-4 leaves out its record {summary}",
    ]
    events = billed(records, superseded, "ev-1", "ev-4", "ev-5", "ev-1")
    assert verdict([line(events, quantity="3")], records, superseded).problems == ["event ev-1 billed twice"]


def test_a_wrong_amount_is_named_under_the_pinned_charge_model() -> None:
    records, superseded, _ = scenario()
    events = billed(records, superseded, "ev-1", "ev-4", "ev-5")
    assert verdict([line(events, amount="40.00")], records, superseded).problems == [
        "amount 40.00 CNY but the pinned terms give 37.50 (off by 2.50 CNY)"
    ]
    tiers = [{"up_to": 2, "unit_price": "10.00"}, {"unit_price": "5.00"}]
    graduated = {"charge_model": "graduated", "properties": {"tiers": tiers}, "included_quantity": "1"}
    # 3 events, 1 included: 2 × 10.00
    assert verdict([line(events, amount="20.00")], records, superseded, {UNIT: graduated}) == Finding(
        CHECK, [], "3 events at graduated = 20.00 CNY"
    )


def test_the_period_figures_count_every_record_of_the_contract_in_the_period() -> None:
    """error_rate over the contract's records of the period, every status, superseded attempts, records
    without an event id and other packages' included; another contract's and another period's not."""
    rule = {**TERMS, "rules": {CLAUSES: "error_rate < 0.55"}}
    superseded = record("ev-a", CLAUSES, "error")
    records = [
        *(record("ev-a", OCR), record("ev-a", CLAUSES, **f1("1")), superseded),
        record("", OCR, "error"),
        record("ev-b", OCR, "timeout", package="logistics"),
        *(record("ev-c", OCR, contract="ctr-other") for _ in range(5)),
        *(record("ev-d", OCR, start_ns=_ns(30, 10)) for _ in range(5)),
    ]
    # 3 of the 5 records of the contract and period fail: 0.6
    events = billed(records, {superseded["record_id"]}, "ev-a")
    assert verdict(
        [line(events, amount="12.50")], records, {superseded["record_id"]}, terms=rule
    ).problems == [
        "quantity 1 but the records give 0 events",
        "event ev-a billed but no ok record of capability model clauses-v1 meets its acceptance rule",
        "amount 12.50 CNY but the pinned terms give 0.00 (off by 12.50 CNY)",
    ]
    latency = {**TERMS, "rules": {CLAUSES: "latency_ms < p99_latency_ms"}}
    slow = record("ev-e", CLAUSES, start_ns=_ns(20), end_ns=_ns(20) + 900_000_000)
    ok = verdict([line(events, amount="12.50")], [*records[:2], slow], set(), terms=latency)
    # p99 of three latencies is the greatest, 900 ms: ev-a's 200 ms clause extraction meets the rule
    assert ok == Finding(CHECK, [], "1 event × 12.50 = 12.50 CNY")


def test_a_price_change_splits_the_events_by_when_they_started() -> None:
    records, superseded, _ = scenario()
    late = [record("ev-11", OCR, start_ns=_ns(20)), record("ev-11", CLAUSES, start_ns=_ns(21), **f1("0.92"))]
    records += late
    change = "2026-11-15T00:00:00+00:00"
    versions = [
        {**PRICE, "effective_from": ""},
        {**PRICE, "properties": {"unit_price": "20.00"}, "effective_from": change},
    ]
    prices = {UNIT: {**versions[-1], "versions": versions}}

    def version(
        events: list[dict[str, Any]], since: str, begin: str, end: str, amount: str
    ) -> dict[str, Any]:
        return {
            **line(events, amount=amount),
            "effective_from": since,
            "segment_start": begin,
            "segment_end": end,
        }

    before = billed(records, superseded, "ev-1", "ev-4", "ev-5")
    after = billed(records, superseded, "ev-11")
    lines = [
        version(before, "", "2026-11-01T00:00:00+00:00", change, "37.50"),
        version(after, change, change, "2026-12-01T00:00:00+00:00", "20.00"),
    ]
    assert verdict(lines, records, superseded, prices) == Finding(
        CHECK, [], "4 events over 2 price versions = 57.50 CNY"
    )
    lines[0]["events"], lines[1]["events"] = before[:2], [before[2], *after]
    lines[0]["quantity"], lines[1]["quantity"] = "2", "2"
    assert verdict(lines, records, superseded, prices).problems == [
        "version from the contract start: quantity 2 but the records give 3 events",
        "version from the contract start: event ev-5 is billable but not billed",
        f"version from {change}: quantity 2 but the records give 1 event",
        f"version from {change}: event ev-5 billed here but started in another line's segment",
    ]


def test_no_line_for_billable_events_a_rule_out_of_the_grammar_and_no_price_are_named() -> None:
    records, superseded, _ = scenario()
    assert verdict([], records, superseded).problems == ["no line, but the records give 3 events to bill"]
    assert verdict([], records[:1], set()) == Finding(CHECK, [], "no billable events and no line")
    events = billed(records, superseded, "ev-1", "ev-4", "ev-5")
    broken = {**TERMS, "rules": {CLAUSES: "sum(outcome_f1) > 1"}}
    [problem] = verdict([line(events)], records, superseded, terms=broken).problems or []
    assert problem.startswith("the unit's events cannot be measured: unknown field 'sum'")
    assert verdict([line(events)], records, superseded, {"other": PRICE}).problems == [
        "the contract prices no such unit"
    ]


def test_an_invoice_without_event_units_has_no_event_verdict() -> None:
    records, _, _ = scenario()
    assert event_findings({**invoice(), "events": {}}, {}, records, set()) == []
