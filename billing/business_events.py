"""Business events: what a composed package is measured and billed in ("contract review events").

The customer (or the package) gives each call of an event the same event id: the record's
`client_request_id` (`X-Request-Id`, or a capability call's `event_id`). An event of a package is
an event id with a record of the period made under that package; its records are those, and the calls
of its required capabilities made under another package of the contract with that event id: a
capability two packages share runs once per event and counts for both. It is
- `billable` when each of the package's required capabilities has a successful record whose acceptance
  rule holds (the capability's outcome rule over the record, pricing.expressions; none: it holds);
- `failed_acceptance` when each has a successful record but for one of them none meets its rule;
- `partial` when a required capability has no successful record in the period.
A price named by the package's unit bills its billable events (billing.selectors measures them for
rating, with the terms the invoice pins); an event that misses is reported here, with its records, and
is not billed. A retry's superseded attempts are left out, as rating leaves them out, and so are the
successful records of a gray-release stage with billing off (gray usage: docs/releases.md). Records
that reach the store after the invoice is final are late usage (billing.lateness): an event they
complete is billed on a later invoice, as the contract's late-usage policy says.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from catalog.models import Capability
from clickhouse_store.queries.billing import EventRecord, event_records, superseded_attempts
from contracts.models import Contract
from pricing.expressions import parse_metric
from releases.selectors import GrayWindow, gray_windows

from .terms import EventTerms, package_event_terms

BILLABLE = "billable"
FAILED_ACCEPTANCE = "failed_acceptance"
PARTIAL = "partial"
STATUSES = (BILLABLE, FAILED_ACCEPTANCE, PARTIAL)


@dataclass(frozen=True)
class BusinessEvent:
    event_id: str
    package: str
    status: str
    records: list[EventRecord]  # by start time
    missing: list[str]  # required capabilities without a successful record (the report: by code)
    not_accepted: list[str]  # required capabilities whose successful records all fail their rule

    @property
    def started(self) -> datetime:
        """When its first record started: the price segment that bills it."""
        return self.records[0].start_time


@dataclass(frozen=True)
class PackageEvents:
    package: str
    unit: str
    counts: dict[str, int]  # status → events


@dataclass(frozen=True)
class EventsReport:
    contract: str
    start: datetime
    end: datetime
    packages: list[PackageEvents]
    events: list[BusinessEvent] = field(default_factory=list)


def measure_events(
    tenant: str,
    contract: str,
    start: datetime,
    end: datetime,
    measured: Sequence[EventTerms],
    *,
    sandbox: bool = False,
) -> list[BusinessEvent]:
    """The business events of [start, end) of these packages of the contract, by package and event id:
    one query for the records, one for the retries' superseded attempts (`sandbox`: a sandbox's)."""
    rules = {m: parse_metric(rule, rule=True) for terms in measured for m, rule in terms.rules.items()}
    by_package = {terms.package: terms for terms in measured}
    attempts = superseded_attempts([contract], start, end, sandbox=sandbox)
    superseded = {a.record_id for a in attempts if a.tenant == tenant}
    gray = [] if sandbox else gray_windows([contract], start, end).get(contract, [])
    by_event: dict[str, list[EventRecord]] = {}
    for row in event_records(tenant, contract, start, end, rules, sandbox=sandbox):
        if row.record_id not in superseded and not _gray(row, gray):
            by_event.setdefault(row.event_id, []).append(row)
    events = []
    for package, terms in sorted(by_package.items()):
        for event_id, rows in sorted(by_event.items()):
            if any(r.package == package for r in rows):  # an event of the package: a call made under it
                shared = [r for r in rows if r.package == package or r.model_id in terms.required]
                events.append(_classify(event_id, package, shared, terms.required))
    return events


def business_events(contract: Contract, start: datetime, end: datetime) -> EventsReport:
    """The contract's business events of [start, end), per package it holds that has capabilities (a
    sandbox contract's from the sandbox's records)."""
    packages = sorted(
        (p for found in contract.event_packages().values() for p in found), key=lambda p: p.code
    )
    measured = [package_event_terms(p) for p in packages]
    codes = dict(Capability.objects.filter(packages__in=packages).values_list("model_id", "code"))
    events = [
        replace(e, missing=[codes[m] for m in e.missing], not_accepted=[codes[m] for m in e.not_accepted])
        for e in measure_events(
            contract.tenant.code, contract.code, start, end, measured, sandbox=contract.sandbox
        )
    ]
    counted = Counter((e.package, e.status) for e in events)
    report = [
        PackageEvents(p.code, p.unit, {status: counted[(p.code, status)] for status in STATUSES})
        for p in packages
    ]
    return EventsReport(contract.code, start, end, report, events)


def _gray(row: EventRecord, windows: Sequence[GrayWindow]) -> bool:
    """A successful record of a gray-release stage with billing off: gray usage, in no billed event."""
    return row.status == "ok" and any(
        w.package == row.package and w.starts_at <= row.start_time < w.ends_at for w in windows
    )


def _classify(event_id: str, package: str, rows: list[EventRecord], required: Sequence[str]) -> BusinessEvent:
    rows = sorted(rows, key=lambda r: (r.start_time, r.record_id))
    missing, not_accepted = [], []
    for model_id in required:
        succeeded = [r for r in rows if r.model_id == model_id and r.status == "ok"]
        if not succeeded:
            missing.append(model_id)
        elif not any(r.accepted for r in succeeded):
            not_accepted.append(model_id)
    status = PARTIAL if missing else FAILED_ACCEPTANCE if not_accepted else BILLABLE
    return BusinessEvent(event_id, package, status, rows, missing, not_accepted)
