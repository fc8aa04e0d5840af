"""Quota leases: the platform's share of a key's monthly token quota among the agents that serve it.

An agent asks for a block of tokens; the grant happens under a row lock on the key's period row
(SELECT … FOR UPDATE), so concurrent grants from any number of agents never exceed the quota:

    remaining = quota − settled spend − outstanding leases

An unsettled lease counts all it was granted; its final report replaces that with what it spent and
so returns the rest. Reports carry the cumulative spend and a sequence number per lease: a report
applies once, a retry answers the same, an older one changes nothing. A non-final report renews the
lease; a lease that expires without its final report stays charged in full (never overspend) until
the agent reports, late, and is reconciled. See docs/agent.md ("Quota leases").
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from agents.models import AgentKey
from agents.selectors import agent_scope
from common.errors import ApiError
from contracts.models import Contract
from webhooks.services import publish_event

from .models import ApiKey, QuotaLease, QuotaPeriod

LEASE_TTL = timedelta(seconds=300)
PERIOD_SKEW = timedelta(seconds=300)  # an agent's clock may be this far off near a month's end
PERIOD_PATTERN = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


class LeaseError(ApiError):
    http_status = 400


class LeaseNotFound(LeaseError):
    http_status = 404


class KeyNotServable(LeaseError):
    http_status = 403


class LeaseConflict(LeaseError):
    http_status = 409


class QuotaExhausted(LeaseError):
    http_status = 429


@dataclass(frozen=True)
class LeaseAnswer:
    lease: QuotaLease
    quota_period: QuotaPeriod
    quota_tokens: int
    created: bool = False  # a grant: new, or the replay of a grant with the same request id
    applied: bool = True  # a report: changed the lease, or was a retry / an older report

    @property
    def remaining_tokens(self) -> int:
        qp = self.quota_period
        return max(0, self.quota_tokens - qp.settled_tokens - qp.outstanding_tokens)


def period_of(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m")


def lease_state(lease: QuotaLease, now: datetime) -> str:
    if lease.settled_at is not None:
        return "settled"
    return "active" if lease.expires_at > now else "expired"


def _servable_key(agent_key: AgentKey, key_hash: str) -> ApiKey:
    """The key, if this agent may serve it; a key outside its scope is as unknown as a missing one."""
    api_key = ApiKey.objects.select_related("tenant", "contract").filter(key_hash=key_hash).first()
    if api_key is None or not agent_scope(agent_key.agent_id).allows(
        api_key.tenant.code, api_key.contract.code
    ):
        raise LeaseNotFound("unknown_api_key", "No API key with this hash is served by this agent.")
    if api_key.revoked_at is not None:
        raise KeyNotServable("api_key_revoked", "This API key is revoked.", {"prefix": api_key.prefix})
    if api_key.contract.status != Contract.Status.ACTIVE:
        raise KeyNotServable(
            "api_key_contract_inactive", "This API key's contract is not active.", {"prefix": api_key.prefix}
        )
    if api_key.quota_tokens is None:
        raise LeaseConflict(
            "no_quota", "This API key has no quota: it needs no lease.", {"prefix": api_key.prefix}
        )
    return api_key


def _locked_period(api_key: ApiKey, period: str) -> QuotaPeriod:
    QuotaPeriod.objects.bulk_create([QuotaPeriod(api_key=api_key, period=period)], ignore_conflicts=True)
    return QuotaPeriod.objects.select_for_update().get(api_key=api_key, period=period)


def _publish_if_exhausted(row: QuotaPeriod, api_key: ApiKey, now: datetime) -> None:
    """`quota.exhausted` the first time nothing of the period remains (the event id makes it once)."""
    quota = int(api_key.quota_tokens or 0)
    if row.exhausted_at is not None or row.settled_tokens + row.outstanding_tokens < quota:
        return
    row.exhausted_at = now
    row.save(update_fields=["exhausted_at"])
    dimension = f"api_key:{api_key.prefix}"
    publish_event(
        "quota.exhausted",
        api_key.tenant,
        {
            "contract": api_key.contract.code,
            "dimension": dimension,
            "api_key": api_key.prefix,
            "month": row.period,
            "included": str(quota),
            "used": str(row.settled_tokens + row.outstanding_tokens),
        },
        f"quota.exhausted:{api_key.contract.code}:{dimension}:{row.period}",
    )


@transaction.atomic
def grant_lease(
    agent_key: AgentKey,
    *,
    key_hash: str,
    period: str,
    tokens: int,
    min_tokens: int,
    request_id: str,
    now: datetime | None = None,
) -> LeaseAnswer:
    """Grant min(tokens, remaining) if at least `min_tokens` remain; a retried request id gets its lease."""
    now = now or timezone.now()
    if not PERIOD_PATTERN.match(period) or period not in {
        period_of(now - PERIOD_SKEW),
        period_of(now + PERIOD_SKEW),
    }:
        raise LeaseConflict(
            "period_not_open", f"Leases are granted for the current month only, not {period!r}."
        )
    if not 1 <= min_tokens <= tokens:
        raise LeaseError("invalid_lease_request", "Need 1 <= min_tokens <= tokens.", {"tokens": tokens})
    api_key = _servable_key(agent_key, key_hash)
    row = _locked_period(api_key, period)
    quota = int(api_key.quota_tokens or 0)
    earlier = QuotaLease.objects.filter(agent_id=agent_key.agent_id, request_id=request_id).first()
    if earlier is not None:
        if earlier.quota_period_id != row.pk:
            raise LeaseConflict("request_id_reused", "This request id was used for another key or period.")
        return LeaseAnswer(earlier, row, quota)
    remaining = max(0, quota - row.settled_tokens - row.outstanding_tokens)
    if remaining < min_tokens:
        raise QuotaExhausted(
            "quota_exhausted",
            f"{remaining} tokens of this key's {period} quota remain; {min_tokens} were asked for.",
            {"remaining_tokens": remaining, "quota_tokens": quota, "period": period},
        )
    granted = min(tokens, remaining)
    lease = QuotaLease.objects.create(
        quota_period=row,
        agent_id=agent_key.agent_id,
        request_id=request_id,
        granted_tokens=granted,
        granted_at=now,
        expires_at=now + LEASE_TTL,
    )
    row.outstanding_tokens += granted
    row.save(update_fields=["outstanding_tokens"])
    _publish_if_exhausted(row, api_key, now)
    return LeaseAnswer(lease, row, quota, created=True)


@transaction.atomic
def settle_lease(
    agent_key: AgentKey,
    lease_id: uuid.UUID,
    *,
    seq: int,
    spent_tokens: int,
    final: bool,
    now: datetime | None = None,
) -> LeaseAnswer:
    """Apply the agent's report `seq` (cumulative spend) once; `final` settles the lease."""
    now = now or timezone.now()
    period_id = (
        QuotaLease.objects.filter(pk=lease_id, agent_id=agent_key.agent_id)
        .values_list("quota_period_id", flat=True)
        .first()
    )
    if period_id is None:
        raise LeaseNotFound("lease_not_found", "No such lease for this agent.", {"lease": str(lease_id)})
    row = QuotaPeriod.objects.select_for_update().select_related("api_key").get(pk=period_id)
    lease = QuotaLease.objects.get(pk=lease_id)  # read again under the lock: reports are serialised
    quota = int(row.api_key.quota_tokens or 0)
    if seq <= lease.report_seq:
        same = (spent_tokens, final) == (lease.spent_tokens, lease.settled_at is not None)
        if seq == lease.report_seq and not same:
            raise LeaseConflict(
                "report_conflict", f"Report {seq} of this lease was applied with other figures.", {"seq": seq}
            )
        return LeaseAnswer(lease, row, quota, applied=False)
    if lease.settled_at is not None:
        raise LeaseConflict("lease_settled", "This lease is settled; it takes no more reports.", {"seq": seq})
    if spent_tokens < lease.spent_tokens:
        raise LeaseError(
            "spend_decreased",
            "A report carries the cumulative spend; it cannot go down.",
            {"reported": lease.spent_tokens, "spent_tokens": spent_tokens},
        )
    charged_before = lease.charged_tokens
    lease.spent_tokens, lease.report_seq = spent_tokens, seq
    if final:
        lease.settled_at = now
        row.outstanding_tokens -= charged_before
        row.settled_tokens += lease.spent_tokens
    else:
        if lease.expires_at > now:  # renewal; an expired lease stays expired until its final report
            lease.expires_at = now + LEASE_TTL
        row.outstanding_tokens += lease.charged_tokens - charged_before
    lease.save(update_fields=["spent_tokens", "report_seq", "settled_at", "expires_at"])
    row.save(update_fields=["outstanding_tokens", "settled_tokens"])
    _publish_if_exhausted(row, row.api_key, now)
    return LeaseAnswer(lease, row, quota)
