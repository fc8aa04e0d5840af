"""The demo's customer sandbox: Acme Legal tries its two contract-review packages together before buying
more. Its simulator sends a burst of the day's events through the serving tree with the sandbox's own
keys; the records land in the sandbox's store, and its projected invoice is a preview (sandbox)."""

from __future__ import annotations

from datetime import datetime

import httpx

from accounts.access import Principal
from accounts.models import Role
from contracts.models import Contract
from sandbox.models import Sandbox
from sandbox.services import open_sandbox
from sandbox.simulator import DAY, Simulated, simulate

from .events import EVENT_PACKAGE

SANDBOX_PACKAGES = ("contract-review", EVENT_PACKAGE)
DAILY_EVENTS = 1000


def demo_sandbox(contract: Contract) -> Sandbox:
    """The tenant's sandbox on SANDBOX_PACKAGES (opened once; later runs find it)."""
    found = Sandbox.objects.select_related("tenant", "contract").filter(tenant=contract.tenant).first()
    if found is not None:
        return found
    owner = Principal(tenant=contract.tenant, role=Role.OWNER, user_id=None)
    return open_sandbox(owner, list(SANDBOX_PACKAGES), DAILY_EVENTS)


def simulate_events(sandbox: Sandbox, serving_url: str, events: int, now: datetime) -> Simulated:
    """The simulator's next `events` of the day (as if they had fallen due), sent to the serving path."""
    Sandbox.objects.filter(pk=sandbox.pk).update(simulated_until=now - DAY * events / sandbox.daily_events)
    sandbox.refresh_from_db()
    with httpx.Client(base_url=serving_url, timeout=60) as client:
        return simulate(sandbox, client, now)
