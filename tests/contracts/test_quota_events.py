"""quota.exhausted: published once per contract, dimension and month when this month's usage (real
records, measured in ClickHouse) reaches the included quantity."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from billing.quotas import publish_exhausted_quotas
from common.periods import month_bounds, month_of
from contracts.models import Contract, ContractPrice
from tests.billing.usage import forget_agents, send
from tests.factories import ContractFactory, TenantFactory
from webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEvent

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]


def this_month_ns() -> int:
    start, _ = month_bounds(month_of(timezone.now()))
    return int((start + timedelta(seconds=1)).timestamp()) * 10**9


def contract_with_quota(code: str, included: int, **fields: Any) -> Contract:
    contract = ContractFactory.create(code=code, tenant=TenantFactory.create(code=f"t-{code}"), **fields)
    ContractPrice.objects.create(
        contract=contract,
        dimension="requests",
        unit_price=Decimal("0.05"),
        included_quantity=Decimal(included),
    )
    ContractPrice.objects.create(contract=contract, dimension="tokens_out", unit_price=Decimal("0.001"))
    return contract


def test_a_used_up_quota_is_published_once(django_capture_on_commit_callbacks: Any) -> None:
    forget_agents()
    full = contract_with_quota("full", 3)
    roomy = contract_with_quota("roomy", 5)
    WebhookEndpoint.objects.create(tenant=full.tenant, url="http://127.0.0.1:9/h")
    send(full, 3, this_month_ns())
    send(roomy, 4, this_month_ns())

    with django_capture_on_commit_callbacks(execute=False):
        assert publish_exhausted_quotas() == 1
        assert publish_exhausted_quotas() == 1  # still exhausted: the same event id, nothing new

    event = WebhookEvent.objects.get()
    month = month_of(timezone.now())
    assert (event.event_id, event.type, event.tenant) == (
        f"quota.exhausted:full:requests:{month}",
        "quota.exhausted",
        full.tenant,
    )
    assert event.payload == {
        "contract": "full",
        "dimension": "requests",
        "month": month,
        "included": "3.000000",
        "used": "3.000000",
    }
    assert WebhookDelivery.objects.count() == 1


def test_contracts_not_served_are_not_watched() -> None:
    forget_agents()
    pending = contract_with_quota("pending", 1)
    send(pending, 2, this_month_ns())
    Contract.objects.filter(pk=pending.pk).update(status=Contract.Status.PENDING_PAYMENT)
    assert publish_exhausted_quotas() == 0
    assert WebhookEvent.objects.count() == 0
