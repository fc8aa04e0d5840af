"""Records rating leaves out, from two sources:

- a `BillingExclusion` (finance resolved a dispute as the customer's dependency): that record;
- a billing pause from the registered pause source (`billing.adjustments`; sla registers its
  `customer_dependency` exclusions on contracts whose term `pause_billing_on_customer_dependency` is
  on): the records in its window (all, or only the failed ones).

`as_of` re-measures a finalised period as it was billed: exclusions made after it was finalised were
credited by notes (or change nothing), so leaving them in keeps a late record from hiding behind them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from treemeter_records.timeutil import unix_nanos

from .adjustments import BillingPause, registered_sources
from .models import BillingExclusion

# Bound-parameter SQL over one record: whether a dispute excluded it, whether an SLA pause covers it.
DISPUTED = "has({ex_ids:Array(UUID)}, record_id)"
PAUSED = (
    "arrayExists((c, s, e, f) -> contract = c AND start_ns >= s AND start_ns < e "
    "AND (f = 0 OR status IN ('error', 'timeout')), "
    "{pz_contracts:Array(String)}, {pz_starts:Array(Int64)}, {pz_ends:Array(Int64)}, "
    "{pz_failed_only:Array(UInt8)})"
)


@dataclass(frozen=True)
class RatingExclusions:
    """What the rating query leaves out, per contract code, and why."""

    record_ids: dict[str, list[str]] = field(default_factory=dict)
    disputes: dict[str, list[int]] = field(default_factory=dict)
    pauses: dict[str, list[BillingPause]] = field(default_factory=dict)

    def params(self) -> dict[str, Any]:
        windows = [x for found in self.pauses.values() for x in found]
        return {
            "ex_ids": sorted(r for ids in self.record_ids.values() for r in ids),
            "pz_contracts": [x.contract for x in windows],
            "pz_starts": [unix_nanos(x.starts_at) for x in windows],
            "pz_ends": [unix_nanos(x.ends_at) for x in windows],
            "pz_failed_only": [1 if x.failed_only else 0 for x in windows],
        }

    def describe(self, contract: str, by_dispute: int, by_pause: int) -> dict[str, Any]:
        """The invoice's statement of what was excluded and why (empty when nothing applied)."""
        if not (self.disputes.get(contract) or self.pauses.get(contract)):
            return {}
        return {
            "records": by_dispute + by_pause,
            "by_dispute": by_dispute,
            "by_sla_pause": by_pause,
            "disputes": self.disputes.get(contract, []),
            "sla_exclusions": [
                {
                    "id": x.reference,
                    "scope": "failed" if x.failed_only else "all",
                    "starts_at": x.starts_at.isoformat(),
                    "ends_at": x.ends_at.isoformat(),
                    "reason": x.reason,
                }
                for x in self.pauses.get(contract, [])
            ],
        }


def rating_exclusions(
    owners: dict[str, str], start: datetime, end: datetime, as_of: datetime | None = None
) -> RatingExclusions:
    """The exclusions of these contracts (code → tenant code) for records in [start, end)."""
    pauses: dict[str, list[BillingPause]] = {}
    source = registered_sources().pauses
    for pause in source.pauses(owners, start, end, as_of) if source is not None else ():
        pauses.setdefault(pause.contract, []).append(pause)
    record_ids: dict[str, list[str]] = {}
    disputes: dict[str, list[int]] = {}
    excluded = BillingExclusion.objects.filter(
        contract__in=list(owners), start_ns__gte=unix_nanos(start), start_ns__lt=unix_nanos(end)
    )
    if as_of is not None:
        excluded = excluded.filter(created_at__lte=as_of)
    for record_id, tenant, contract, dispute in excluded.values_list(
        "record_id", "tenant", "contract", "dispute_id"
    ).order_by("record_id"):
        if owners[contract] == tenant:
            record_ids.setdefault(contract, []).append(str(record_id))
            if dispute not in disputes.setdefault(contract, []):
                disputes[contract].append(dispute)
    return RatingExclusions(record_ids, disputes, pauses)
