"""Business-event lines, re-derived from the export's records (docs/billing.md, "Business events"): kept
here on its own, as the platform measures them (``billing.business_events``).

The invoice pins each event unit it prices (``invoice["events"]``: unit → the package, the model ids of
its required capabilities, the acceptance rules by model id). The records of a unit are the export's
records of the invoice's contract that start in the period, are not superseded by a retry, carry an
event id (``client_request_id``) and were made under the unit's package; an event is its records with
one event id. It is billable when every required model has an ``ok`` record for which its rule holds (no
rule: it holds); else ``partial`` (a required model has no ``ok`` record) or ``failed_acceptance``.

A rule is a metric expression (``metrics``) that may also read ``outcome_<key>`` and the period's
figures, and holds when its value is not 0, computed as the engine computes the platform's SQL:

- ``outcome_<key>`` (the key lower case, as the grammar reads names): the value under that key of the
  record's outcome object as ``if(JSONType(o, k) = 'String', toFloat64OrZero(JSONExtractString(o, k)),
  JSONExtractFloat(o, k))`` gives it: an integer as a double; a string parsed as the engine parses a
  Float64 (``engine_float``); a bool (true as well), null, an array, an object, a missing key or a null
  outcome: 0;
- ``p50_latency_ms``, ``p99_latency_ms``: ``quantileExact`` of the latencies (``quantile_exact``) and
  ``error_rate`` the share of records not ``ok``, over all the contract's records of the period, every
  status, superseded ones included.

NaN (an outcome string "nan") is not 0, so a rule of it alone holds; a comparison with it is 0; ``min``
and ``max`` keep the second value where the first is NaN and NaN where the second is, as the engine's
``least`` and ``greatest`` do over a record's values.

A unit's line states how many events it bills and lists them (``events``: event id and the ids of all its
records); its amount is what the pinned terms give for that many. Where the price changed within the
period there is a line per version, each billing the events whose first record started in its segment,
and maybe a period-bound line, which bills none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from .credits import Finding
from .metrics import FIELDS, MAX_LENGTH, MetricError, Parser, Value, instant_ns
from .rating import CHARGE_MODELS, amount_problems, charge_amount, priced_as, segment_amounts

BILLABLE = "billable"
FAILED_ACCEPTANCE = "failed_acceptance"
PARTIAL = "partial"
PERIOD_FIGURES = ("p50_latency_ms", "p99_latency_ms", "error_rate")
# What the engine's Float64 parser (toFloat64OrZero) takes whole: ASCII digits with an optional point and
# exponent, inf or infinity, nan with an optional "(chars)", each signed or not, in any case; nothing
# around it (not even white space). Anything else is 0.
_ENGINE_NUMBER = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|(nan(?:\([A-Za-z0-9_]*\))?))",
    re.IGNORECASE,
)


def engine_float(text: str) -> float:
    """ClickHouse's ``toFloat64OrZero(text)``: correctly rounded like Python's ``float``, but of a narrower
    syntax (no spaces, underscores or non-ASCII digits; ``nan(…)`` taken) and 0 for anything else."""
    match = _ENGINE_NUMBER.fullmatch(text)
    if match is None:
        return 0.0
    return math.nan if match.group(1) else float(text)


def outcome_number(outcome: Any, key: str) -> float:
    """``outcome_<key>`` of a record whose outcome object is ``outcome`` (the module docstring says how)."""
    value = outcome.get(key) if isinstance(outcome, dict) else None
    if isinstance(value, str):
        return engine_float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0  # a bool too: the engine's JSONExtractFloat gives 0 for true as for false
    return float(value)


def quantile_exact(values: Sequence[float], level: float) -> float:
    """ClickHouse's ``quantileExact(level)``: of the values sorted, the one at index ``level × count``
    (a double product, truncated; the last at level 1 or more); NaN of none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[int(level * len(ordered)) if level < 1 else len(ordered) - 1]


def period_figures(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The period's figures a rule may read, over these records (all the contract's of the period)."""
    latencies = [FIELDS["latency_ms"](r) for r in records]
    failed = sum(1 for r in records if r["status"] != "ok")
    return {
        "p50_latency_ms": quantile_exact(latencies, 0.5),
        "p99_latency_ms": quantile_exact(latencies, 0.99),
        "error_rate": failed / len(records) if records else math.nan,
    }


class _RuleParser(Parser):
    """The metric grammar without an aggregation, with the period's figures and ``outcome_<key>``; a
    rule's value reads the record with the figures merged in (``rule_holds``)."""

    def rule(self) -> Value:
        value = self._or()
        kind, found, position = self._peek()
        if kind != "end":
            raise MetricError(f"unexpected {found!r} at position {position}")
        return value

    def _atom(self) -> Value:
        kind, text, _ = self._peek()
        name = text.lower()
        if kind == "name" and name in PERIOD_FIGURES:
            self.index += 1
            return lambda r: float(r[name])
        if kind == "name" and name.startswith("outcome_") and len(name) > len("outcome_"):
            self.index += 1
            key = name[len("outcome_") :]
            return lambda r: outcome_number(r.get("outcome"), key)
        return super()._atom()


@lru_cache(maxsize=256)
def parse_rule(text: str) -> Value:
    """A pinned acceptance rule's per-record value, or MetricError naming what is wrong and where."""
    if not isinstance(text, str) or not text.strip():
        raise MetricError("the rule is empty")
    if len(text) > MAX_LENGTH:
        raise MetricError(f"the rule is longer than {MAX_LENGTH} characters")
    return _RuleParser(text).rule()


def rule_holds(rule: Value, record: dict[str, Any], figures: dict[str, float]) -> bool:
    """Whether the rule's value for the record, with the period's ``figures``, is not 0."""
    return rule({**record, **figures}) != 0


@dataclass(frozen=True)
class Event:
    """A business event: its id, its records, the required models without an ``ok`` record and those whose
    ``ok`` records all fail their rule."""

    event_id: str
    records: list[dict[str, Any]]
    missing: list[str]
    not_accepted: list[str]

    @property
    def status(self) -> str:
        return PARTIAL if self.missing else FAILED_ACCEPTANCE if self.not_accepted else BILLABLE

    @property
    def started(self) -> int:
        """When its first record started (ns): the price segment that bills it."""
        return min(int(r["start_ns"]) for r in self.records)

    @property
    def record_ids(self) -> list[str]:
        return sorted(_record_id(r) for r in self.records)


def _record_id(record: dict[str, Any]) -> str:
    return str(record["record_id"]).lower()  # the engine's toString(UUID)


def classify_events(
    unit: dict[str, Any], records: Iterable[dict[str, Any]], figures: dict[str, float]
) -> dict[str, Event]:
    """The events of a unit (its pinned ``package``, ``required`` model ids and ``rules``) by event id,
    from the records considered for it (`_of_unit`: not superseded, with an event id); MetricError
    when a rule cannot be parsed or a record lacks a field its rule reads."""
    rules = {model_id: parse_rule(text) for model_id, text in unit.get("rules", {}).items()}
    grouped: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        grouped.setdefault(record["client_request_id"], []).append(record)
    events = {}
    for event_id, rows in sorted(grouped.items()):
        missing, not_accepted = [], []
        for model_id in unit["required"]:
            succeeded = [r for r in rows if r["model_id"] == model_id and r["status"] == "ok"]
            if not succeeded:
                missing.append(model_id)
            elif model_id in rules and not any(
                _accepted(rules[model_id], model_id, r, figures) for r in succeeded
            ):
                not_accepted.append(model_id)
        events[event_id] = Event(event_id, rows, missing, not_accepted)
    return events


def _accepted(rule: Value, model_id: str, record: dict[str, Any], figures: dict[str, float]) -> bool:
    try:
        return rule_holds(rule, record, figures)
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise MetricError(
            f"record {record.get('record_id')} lacks a field the rule of {model_id} reads: {error!r}"
        ) from None


def event_findings(
    invoice: dict[str, Any], prices: dict[str, Any], records: Iterable[Any], superseded: set[str]
) -> list[Finding]:
    """One verdict per business-event unit the invoice pins (``invoice["events"]``), from the export's
    ``records`` (parsed lines: anything not a record of the invoice's contract and period is left out)
    and the ids of those a retry ``superseded``."""
    units: dict[str, dict[str, Any]] = invoice.get("events") or {}
    if not units:
        return []
    period = _period_records(invoice, records)
    considered = [
        r
        for r in period
        if _record_id(r) not in superseded
        and isinstance(r.get("client_request_id"), str)
        and r["client_request_id"]
    ]
    out = []
    try:
        figures = period_figures(period)
    except (KeyError, TypeError, ValueError) as error:
        problem = f"the period's latencies and error rate cannot be computed: {error!r}"
        return [Finding(f"event line {code}", [problem], "") for code in units]
    for code, unit in units.items():
        check = f"event line {code}"
        try:
            events = classify_events(unit, _of_unit(considered, unit), figures)
        except (MetricError, KeyError, TypeError) as error:
            out.append(Finding(check, [f"the unit's events cannot be measured: {error}"], ""))
            continue
        try:
            out.append(Finding(check, *_unit_lines(invoice, prices, code, events)))
        except (InvalidOperation, KeyError, TypeError, ValueError, StopIteration) as error:
            out.append(Finding(check, [f"the lines cannot be re-rated: {error!r}"], ""))
    return out


def _of_unit(records: list[dict[str, Any]], unit: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of the unit's events: an event id with a record made under the unit's package; its
    records are those, and the calls of its required capabilities under another package of the contract
    with that event id (a shared capability runs once per event and counts for both)."""
    own = {r["client_request_id"] for r in records if r.get("package") == unit["package"]}
    return [
        r
        for r in records
        if r["client_request_id"] in own
        and (r.get("package") == unit["package"] or r.get("model_id") in unit["required"])
    ]


def _period_records(invoice: dict[str, Any], records: Iterable[Any]) -> list[dict[str, Any]]:
    """The records of the invoice's contract starting in its period, each record id once."""
    start_ns, end_ns = invoice["period_start_ns"], invoice["period_end_ns"]
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for record in records:
        if not isinstance(record, dict):
            continue
        start, record_id = record.get("start_ns"), str(record.get("record_id")).lower()
        if (
            record.get("tenant") != invoice["tenant"]
            or record.get("contract") != invoice["contract"]
            or type(start) is not int
            or not start_ns <= start < end_ns
            or record_id in seen
        ):
            continue
        seen.add(record_id)
        out.append(record)
    return out


def _unit_lines(
    invoice: dict[str, Any], prices: dict[str, Any], code: str, events: dict[str, Event]
) -> tuple[list[str], str]:
    """The unit's lines against its events: one line, or a line per price version (``segment_start``)
    and maybe a period-bound line."""
    currency = invoice["currency"]
    billable = {e.event_id: e for e in events.values() if e.status == BILLABLE}
    ours = [x for x in invoice["lines"] if x["kind"] == "usage" and x["dimension"] == code]
    terms = prices.get(code)
    if not ours:
        if billable:
            return [f"no line, but the records give {_events(len(billable))} to bill"], ""
        return [], "no billable events and no line"
    if terms is None or terms.get("charge_model") not in CHARGE_MODELS:
        return ["the contract prices no such unit" if terms is None else "an unknown charge model"], ""
    if any("segment_start" in x for x in ours):
        return _version_lines(invoice, terms, ours, events, billable)
    if len(ours) != 1:
        return [f"{len(ours)} lines, but the pinned terms price the period's events in one"], ""
    line = ours[0]
    count = len(billable)
    problems = _quantity_problems(line, count)
    problems += _listed_problems(line, events, billable)
    expected = charge_amount(terms, Decimal(count), Decimal(0), currency)
    problems += amount_problems(Decimal(line["amount"]), expected, currency)
    return problems, f"{_events(count)} {priced_as(terms)} = {expected} {currency}"


def _version_lines(
    invoice: dict[str, Any],
    terms: dict[str, Any],
    ours: list[dict[str, Any]],
    events: dict[str, Event],
    billable: dict[str, Event],
) -> tuple[list[str], str]:
    """A line per price version, each billing the billable events that started in its segment, rated as
    the platform rates a dimension whose price changed (``rating.segment_amounts``, with the newest
    version's included quantity and bound); the period-bound line bills no events."""
    currency = invoice["currency"]
    segments = [x for x in ours if "segment_start" in x]
    bounds = [x for x in ours if "segment_start" not in x]
    versions = {v["effective_from"]: v for v in terms.get("versions", [])}
    unknown = [x["effective_from"] for x in segments if x["effective_from"] not in versions]
    if unknown or len(bounds) > 1:
        return ["the lines name price versions the export does not hold"], ""
    problems: list[str] = []
    placed: set[str] = set()
    pairs = []
    for line in segments:
        name = f"version from {line['effective_from'] or 'the contract start'}"
        begin, finish = instant_ns(line["segment_start"]), instant_ns(line["segment_end"])
        own = {k: e for k, e in billable.items() if begin <= e.started < finish}
        placed |= own.keys()
        problems += [f"{name}: {p}" for p in _quantity_problems(line, len(own))]
        problems += [f"{name}: {p}" for p in _listed_problems(line, events, own)]
        pairs.append((versions[line["effective_from"]], Decimal(len(own))))
    problems += [
        f"event {k} is billable but started in no segment of the lines"
        for k in sorted(billable.keys() - placed)
    ]
    for line in bounds:
        problems += [f"period bound line: {p}" for p in _listed_problems(line, events, {})]
    amounts, bound = segment_amounts(pairs, terms, currency)
    for line, expected in zip(segments, amounts, strict=True):
        amount = Decimal(line["amount"])
        if amount != expected:
            problems.append(
                f"version from {line['effective_from'] or 'the contract start'}: amount {amount} {currency} "
                f"but its terms give {expected} (off by {amount - expected} {currency})"
            )
    stated_bound = Decimal(bounds[0]["amount"]) if bounds else None
    if stated_bound != bound:
        problems.append(f"period bound line {stated_bound} {currency} but the newest terms give {bound}")
    total = sum(amounts, Decimal(0)) + (bound or 0)
    return problems, f"{_events(len(billable))} over {len(segments)} price versions = {total} {currency}"


def _events(count: int) -> str:
    return f"{count} event" if count == 1 else f"{count} events"


def _quantity_problems(line: dict[str, Any], count: int) -> list[str]:
    stated = Decimal(line["quantity"])
    return [] if stated == count else [f"quantity {stated} but the records give {_events(count)}"]


def _listed_problems(line: dict[str, Any], events: dict[str, Event], own: dict[str, Event]) -> list[str]:
    """What is wrong with the events a line lists (``events``: event id and record ids), given all the
    unit's ``events`` and those the line should bill (``own``: a version's line, those that started in
    its segment; a period-bound line, none)."""
    listed = line.get("events", [])
    if not isinstance(listed, list):
        return ["its events are not a list"]
    problems: list[str] = []
    seen: set[str] = set()
    for item in listed:
        event_id, record_ids = str(item["event_id"]), item["records"]
        if event_id in seen:
            problems.append(f"event {event_id} billed twice")
            continue
        seen.add(event_id)
        event = events.get(event_id)
        if event is None:
            problems.append(
                f"event {event_id} billed but the period has no record of it under the unit's package"
            )
        elif event_id in own:
            problems += _record_problems(event, record_ids)
        elif event.status == PARTIAL:
            problems += [
                f"event {event_id} billed but capability model {m} has no ok record" for m in event.missing
            ]
        elif event.status == FAILED_ACCEPTANCE:
            problems += [
                f"event {event_id} billed but no ok record of capability model {m} meets its acceptance rule"
                for m in event.not_accepted
            ]
        else:
            problems.append(f"event {event_id} billed here but started in another line's segment")
    problems += [f"event {k} is billable but not billed" for k in sorted(own.keys() - seen)]
    return problems


def _record_problems(event: Event, stated: Any) -> list[str]:
    """The record ids a line states for an event against all the event's records."""
    if not isinstance(stated, list):
        return [f"event {event.event_id}: its records are not a list"]
    listed = sorted(str(x).lower() for x in stated)
    if listed == event.record_ids:
        return []
    ours = set(event.record_ids)
    problems = [
        f"event {event.event_id} lists record {x}, not one of its records" for x in listed if x not in ours
    ]
    problems += [f"event {event.event_id} leaves out its record {x}" for x in sorted(ours - set(listed))]
    if not problems:
        problems.append(f"event {event.event_id} lists a record more than once")
    return problems
