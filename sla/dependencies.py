"""The dependency watch: a customer's own system (e.g. a hospital's HIS) probed every minute, and its
outages turned into `customer_dependency` exclusions without anyone declaring them.

- A probe is a GET of the dependency's health URL: healthy when it answers 2xx or 3xx within
  PROBE_TIMEOUT_SECONDS. The URL is checked as a webhook's is (`webhooks.destinations`: public addresses
  only, the connection pinned to the checked address), so a contract cannot point the platform at its
  own network.
- OUTAGE_AFTER (five minutes) of consecutive failed checks (no healthy check between them, and none
  more than `sla.selectors.MAX_GAP` apart) opens an exclusion of every request from the first failed
  check on. Each further failed check extends it; the first healthy check closes it at that check's
  time.
- Opening and closing publish `customer_dependency.outage` (webhook), and on a contract whose term
  `pause_billing_on_customer_dependency` is on, billing leaves the window's records out (the SLA's
  billing pause source, `sla.billing_sources`); the invoice and the SLA report name the window.

Retry: a check is stored once per call; applying the rule again after the same check changes nothing
(the open window is found and extended to the same instant, a closed one is not reopened).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import httpx
from django.db import transaction

from contracts.models import Contract
from webhooks.destinations import UnsafeDestination, check_endpoint_url, resolve_destination
from webhooks.services import publish_event

from .models import CustomerDependency, DependencyCheck, Exclusion
from .selectors import failing_since

OUTAGE_AFTER = timedelta(minutes=5)
PROBE_TIMEOUT_SECONDS = 5.0
EVENT_TYPE = "customer_dependency.outage"


def set_dependency(contract: Contract, name: str, health_url: str) -> CustomerDependency:
    """Watch (or re-point) the contract's dependency. The URL must not resolve to a non-public address
    (400 unsafe_webhook_url); one that does not resolve yet is accepted and fails its checks.
    Retry: the same PUT again stores the same row; its checks and outages are kept."""
    check_endpoint_url(health_url)
    dependency, _ = CustomerDependency.objects.update_or_create(
        contract=contract, defaults={"name": name, "health_url": health_url}
    )
    return dependency


def probe(dependency: CustomerDependency, now: datetime) -> DependencyCheck:
    """GET the health URL once and store what it answered."""
    started = time.monotonic()
    status_code, error = None, ""
    try:
        destination = resolve_destination(dependency.health_url)
        with httpx.Client(timeout=PROBE_TIMEOUT_SECONDS) as http:
            response = http.get(
                destination.url,
                headers={"Host": destination.host_header, "User-Agent": "Treemeter-DependencyWatch/1"},
                extensions={"sni_hostname": destination.host},
            )
        status_code = response.status_code
    except UnsafeDestination as exc:
        error = exc.message
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    return DependencyCheck.objects.create(
        dependency=dependency,
        checked_at=now,
        healthy=status_code is not None and 200 <= status_code < 400,
        status_code=status_code,
        error=error[:500],
        duration_ms=int((time.monotonic() - started) * 1000),
    )


def apply_check(check: DependencyCheck) -> Exclusion | None:
    """The outage rule after one check: open, extend or close the dependency's exclusion (the one
    touched, or None)."""
    dependency = check.dependency
    with transaction.atomic():
        current = (
            Exclusion.objects.select_for_update()
            .filter(detected_by=dependency, closed=False)
            .order_by("-starts_at")
            .first()
        )
        if current is not None:
            if check.checked_at > current.ends_at:
                current.ends_at = check.checked_at
            current.closed = check.healthy
            current.save(update_fields=["ends_at", "closed"])
            if check.healthy:
                _publish(current, "closed")
            return current
        if check.healthy:
            return None
        first = failing_since(dependency, check.checked_at)
        if check.checked_at - first < OUTAGE_AFTER or _covered(dependency, first):
            return None
        exclusion = Exclusion.objects.create(
            contract=dependency.contract,
            kind=Exclusion.Kind.CUSTOMER_DEPENDENCY,
            scope=Exclusion.Scope.ALL,
            starts_at=first,
            ends_at=check.checked_at,
            reason=f"{dependency.name} ({dependency.health_url}) failed every check from "
            f"{first.isoformat()} on (detected automatically)",
            detected_by=dependency,
            closed=False,
        )
        _publish(exclusion, "opened")
        return exclusion


def _covered(dependency: CustomerDependency, moment: datetime) -> bool:
    """Whether a window this dependency opened already holds `moment` (a closed outage is not reopened)."""
    windows = Exclusion.objects.filter(detected_by=dependency, starts_at__lte=moment, ends_at__gt=moment)
    return windows.exists()


def _publish(exclusion: Exclusion, action: str) -> None:
    contract = exclusion.contract
    payload = {
        "contract": contract.code,
        "action": action,
        "exclusion": exclusion.pk,
        "starts_at": exclusion.starts_at.isoformat(),
        "ends_at": exclusion.ends_at.isoformat(),
        "billing_paused": contract.pause_billing_on_customer_dependency,
    }
    publish_event(EVENT_TYPE, contract.tenant, payload, f"{EVENT_TYPE}:{exclusion.pk}:{action}")


def watch(dependency: CustomerDependency, now: datetime) -> Exclusion | None:
    """Probe the dependency and apply the rule."""
    return apply_check(probe(dependency, now))
