"""Business events: what a composed package is measured in ("contract review events"), before billing.

The customer (or the package) gives each call of an event the same event id: the record's
`client_request_id` (`X-Client-Request-Id`, or a capability call's `event_id`). An event of a package is
the records made under that package with one event id. It is
- `billable` when each of the package's required capabilities has a successful record whose acceptance
  rule holds (the capability's outcome rule over the record, pricing.expressions; none: it holds);
- `failed_acceptance` when each has a successful record but for one of them none meets its rule;
- `partial` when a required capability has no successful record in the period.
An event that misses is reported here, with its records, and is not billed. A retry's superseded
attempts are left out, as rating leaves them out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from catalog.models import PackageCapability
from clickhouse_store.queries.billing import EventRecord, event_records, superseded_attempts
from contracts.models import Contract
from pricing.expressions import Metric, parse_metric

BILLABLE = "billable"
FAILED_ACCEPTANCE = "failed_acceptance"
PARTIAL = "partial"
STATUSES = (BILLABLE, FAILED_ACCEPTANCE, PARTIAL)


@dataclass(frozen=True)
class RequiredCapability:
    code: str
    model_id: str


@dataclass(frozen=True)
class BusinessEvent:
    event_id: str
    package: str
    status: str
    records: list[EventRecord]
    missing: list[str]  # required capabilities without a successful record
    not_accepted: list[str]  # required capabilities whose successful records all fail their rule


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


def business_events(contract: Contract, start: datetime, end: datetime) -> EventsReport:
    """The contract's business events of [start, end), per package it holds that has capabilities."""
    required: dict[str, list[RequiredCapability]] = {}
    rules: dict[str, Metric] = {}
    units: dict[str, str] = {}
    held = contract.held_packages()
    links = PackageCapability.objects.filter(package__in=held).select_related("package", "capability")
    for link in links.order_by("package__code", "capability__code"):
        capability = link.capability
        units[link.package.code] = link.package.unit
        if link.required:
            required.setdefault(link.package.code, []).append(
                RequiredCapability(capability.code, capability.model_id)
            )
        if capability.acceptance_rule:
            rules[capability.model_id] = parse_metric(capability.acceptance_rule, rule=True)
    superseded = {
        a.record_id
        for a in superseded_attempts([contract.code], start, end)
        if a.tenant == contract.tenant.code
    }
    grouped: dict[tuple[str, str], list[EventRecord]] = {}
    for row in event_records(contract.tenant.code, contract.code, start, end, rules):
        if row.package in required and row.record_id not in superseded:
            grouped.setdefault((row.package, row.event_id), []).append(row)
    events = [
        _classify(event_id, package, rows, required[package]) for (package, event_id), rows in grouped.items()
    ]
    counted = Counter((e.package, e.status) for e in events)
    packages = [
        PackageEvents(code, units[code], {status: counted[(code, status)] for status in STATUSES})
        for code in sorted(required)
    ]
    return EventsReport(contract.code, start, end, packages, events)


def _classify(
    event_id: str, package: str, rows: list[EventRecord], required: list[RequiredCapability]
) -> BusinessEvent:
    missing, not_accepted = [], []
    for capability in required:
        succeeded = [r for r in rows if r.model_id == capability.model_id and r.status == "ok"]
        if not succeeded:
            missing.append(capability.code)
        elif not any(r.accepted for r in succeeded):
            not_accepted.append(capability.code)
    status = PARTIAL if missing else FAILED_ACCEPTANCE if not_accepted else BILLABLE
    return BusinessEvent(event_id, package, status, rows, missing, not_accepted)
