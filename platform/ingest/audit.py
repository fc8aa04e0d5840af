"""The scheduled store audit: the records in ClickHouse against the log, per contract, over a window
(not a customer sandbox's contract: its records are stored apart and may be reset).

A record changed, deleted or inserted behind the log's back is tampering (or corruption). Ingest runs it:
it owns the outbox that is drained first (a committed batch still there is not "missing"); the
comparison itself is the ledger's (`ledger.selectors.audit_store`). Beat runs
`ledger.audit_store` hourly over the last `LEDGER_AUDIT_WINDOW_HOURS`; each finding is published as a
`ledger.store_mismatch` webhook event to the platform's endpoints and the record's tenant's, once per
(contract, window, finding kind, ids).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from accounts.models import Tenant
from contracts.models import Contract
from ledger.models import LogLeaf
from ledger.selectors import audit_store
from treemeter_records.timeutil import unix_nanos
from webhooks.services import publish_event

from .outbox import store_pending

EVENT = "ledger.store_mismatch"


@dataclass(frozen=True)
class AuditFinding:
    tenant: str
    contract: str
    kind: str  # changed | missing | unlogged
    record_ids: list[str]


def audit_window(start: datetime, end: datetime) -> list[AuditFinding]:
    """Audit every contract with logged records whose start time lies in [start, end); publish findings."""
    store_pending()  # a committed batch still in the outbox is not "missing"
    start_ns, end_ns = unix_nanos(start), unix_nanos(end)
    contracts = (
        LogLeaf.objects.filter(start_ns__gte=start_ns, start_ns__lt=end_ns)
        .values_list("tenant", "contract")
        .distinct()
        .order_by("tenant", "contract")
    )
    sandboxes = set(Contract.objects.filter(sandbox=True).values_list("code", flat=True))
    findings = []
    for tenant, contract in contracts:
        if contract in sandboxes:  # stored apart (sandbox_records), and reset at will: not audited
            continue
        result = audit_store(tenant, contract, start_ns, end_ns)
        for kind in ("changed", "missing", "unlogged"):
            if result[kind]:
                finding = AuditFinding(tenant, contract, kind, result[kind])
                _publish(finding, start, end)
                findings.append(finding)
    return findings


def audit_recent(now: datetime, hours: int) -> list[AuditFinding]:
    return audit_window(now - timedelta(hours=hours), now)


def _publish(finding: AuditFinding, start: datetime, end: datetime) -> None:
    ids = ",".join(finding.record_ids)
    digest = hashlib.sha256(f"{finding.contract}|{finding.kind}|{ids}".encode()).hexdigest()[:32]
    publish_event(
        EVENT,
        Tenant.objects.filter(code=finding.tenant).first(),
        {
            "tenant": finding.tenant,
            "contract": finding.contract,
            "kind": finding.kind,
            "record_ids": finding.record_ids[:1000],
            "count": len(finding.record_ids),
            "window": {"start": start.isoformat(), "end": end.isoformat()},
        },
        f"{EVENT}:{digest}",
    )
