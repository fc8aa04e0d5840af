"""Records rating leaves out, from four sources:

- a `BillingExclusion` (finance resolved a dispute as the customer's dependency): that record;
- a retry's signed decision (`supersedes`, docs/record-format.md): the attempts it names, which were
  sent to an executor and never answered, so that a request is billed once however many executors
  ran it;
- a billing pause from the registered pause source (`billing.adjustments`; sla registers its
  `customer_dependency` exclusions on contracts whose term `pause_billing_on_customer_dependency` is
  on): the records in its window (all, or only the failed ones);
- a gray release (`releases`): the records of a package made while a stage with billing off was in
  force there. They are gray usage: metered, shown on the invoice with the reason `gray_release` and its
  stages, billed at zero.

`as_of` re-measures a finalised period as it was billed: exclusions made after it was finalised were
credited by notes (or change nothing), so leaving them in keeps a late record from hiding behind them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from clickhouse_store.queries.billing import Excluded, PauseWindow, superseded_attempts
from clickhouse_store.queries.releases import gray_record_ids
from releases.selectors import GrayWindow, gray_windows
from treemeter_records.timeutil import unix_nanos

from .adjustments import BillingPause, registered_sources
from .models import BillingExclusion


@dataclass(frozen=True)
class RatingExclusions:
    """What the rating query leaves out, per contract code, and why."""

    record_ids: dict[str, list[str]] = field(default_factory=dict)
    disputes: dict[str, list[int]] = field(default_factory=dict)
    pauses: dict[str, list[BillingPause]] = field(default_factory=dict)
    superseded: dict[str, list[str]] = field(default_factory=dict)
    gray: dict[str, list[GrayWindow]] = field(default_factory=dict)
    gray_ids: dict[str, list[str]] = field(default_factory=dict)  # neither disputed nor superseded

    def excluded(self) -> Excluded:
        """What the rating query leaves out (`clickhouse_store.queries.billing.usage_rows`): gray records
        by their ids, beside the disputed ones (the query counts both as `by_dispute`)."""
        return Excluded(
            tuple(r for ids in (*self.record_ids.values(), *self.gray_ids.values()) for r in ids),
            tuple(
                PauseWindow(x.contract, x.starts_at, x.ends_at, x.failed_only)
                for found in self.pauses.values()
                for x in found
            ),
            tuple((contract, r) for contract, ids in self.superseded.items() for r in ids),
        )

    def describe(self, contract: str, by_dispute: int, by_pause: int, by_retry: int) -> dict[str, Any]:
        """The invoice's statement of what was excluded and why (empty when nothing applied). `by_dispute`
        is the rating query's count of records excluded by id: the gray ones are told apart here."""
        gray = self.gray.get(contract)
        if not (self.disputes.get(contract) or self.pauses.get(contract) or by_retry or gray):
            return {}
        by_gray = len(self.gray_ids.get(contract, ()))
        stated = {"by_gray_release": by_gray, "gray_release": [w.as_json() for w in gray]} if gray else {}
        return {
            "records": by_dispute + by_pause + by_retry,
            "by_dispute": by_dispute - by_gray,
            "by_sla_pause": by_pause,
            "by_retry": by_retry,
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
            **stated,
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
    superseded: dict[str, list[str]] = {}
    for attempt in superseded_attempts(list(owners), start, end):
        if owners[attempt.contract] == attempt.tenant and (as_of is None or attempt.ingested_at <= as_of):
            superseded.setdefault(attempt.contract, []).append(attempt.record_id)
    gray = gray_windows(owners, start, end)
    gray_ids = {
        contract: _gray_ids(owners[contract], contract, windows, start, end, record_ids, superseded)
        for contract, windows in gray.items()
    }
    return RatingExclusions(record_ids, disputes, pauses, superseded, gray, gray_ids)


def _gray_ids(
    tenant: str,
    contract: str,
    windows: list[GrayWindow],
    start: datetime,
    end: datetime,
    *taken: dict[str, list[str]],
) -> list[str]:
    """The contract's records in its gray windows that no dispute or retry already leaves out."""
    spans = [(w.package, unix_nanos(w.starts_at), unix_nanos(w.ends_at)) for w in windows]
    already = {r for found in taken for r in found.get(contract, ())}
    return [r for r in gray_record_ids(tenant, contract, spans, start, end) if r not in already]
