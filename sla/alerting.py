"""Open, keep and resolve SLA alerts from one evaluation: deduplicated, and resolved when clear."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from contracts.models import Contract
from webhooks.services import publish_event

from .models import AlertEvent, Objective, SlaAlert


@dataclass(frozen=True)
class Condition:
    """A rule that holds now for one subject."""

    severity: str
    measured: dict[str, Any]
    objective: Objective | None = None


def _payload(alert: SlaAlert, event: str, at: datetime) -> dict[str, Any]:
    return {
        "type": f"sla.alert.{event}",
        "tenant": alert.contract.tenant.code,
        "contract": alert.contract.code,
        "kind": alert.kind,
        "rule": alert.rule,
        "subject": alert.subject,
        "severity": alert.severity,
        "measured": alert.measured,
        "fired_at": alert.fired_at.isoformat(),
        "at": at.isoformat(),
    }


def _record_event(alert: SlaAlert, kind: str, at: datetime) -> None:
    """Persist the alert's state change and publish it as a signed webhook event (sent on commit)."""
    event = AlertEvent.objects.create(alert=alert, kind=kind, at=at, payload=_payload(alert, kind, at))
    publish_event(event.payload["type"], alert.contract.tenant, event.payload, f"sla.alert:{event.pk}")


def reconcile(contract: Contract, kind: str, holding: dict[tuple[str, str], Condition], now: datetime) -> int:
    """Make the open alerts of `kind` match `holding` ({(rule, subject): condition}) at `now`.

    A new (rule, subject) opens an alert and a `fired` event; one still holding stays open, unchanged
    apart from last_evaluated_at; an open alert no longer holding is resolved with a `resolved` event.
    The contract row is locked, so concurrent evaluations cannot open the same alert twice.
    Returns how many alerts of `kind` are open afterwards.
    """
    with transaction.atomic():
        Contract.objects.select_for_update().filter(pk=contract.pk).first()
        open_alerts = {
            (a.rule, a.subject): a
            for a in SlaAlert.objects.filter(contract=contract, kind=kind, resolved_at__isnull=True)
        }
        still_open = [alert.pk for key, alert in open_alerts.items() if key in holding]
        SlaAlert.objects.filter(pk__in=still_open).update(last_evaluated_at=now)
        for key, condition in holding.items():
            if key in open_alerts:
                continue
            alert = SlaAlert.objects.create(
                contract=contract,
                kind=kind,
                rule=key[0],
                subject=key[1],
                objective=condition.objective,
                severity=condition.severity,
                fired_at=now,
                measured=condition.measured,
                last_evaluated_at=now,
            )
            _record_event(alert, "fired", now)
        for key, alert in open_alerts.items():
            if key not in holding:
                alert.resolved_at = alert.last_evaluated_at = now
                alert.save(update_fields=["resolved_at", "last_evaluated_at"])
                _record_event(alert, "resolved", now)
    return len(holding)
