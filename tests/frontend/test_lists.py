"""Long lists come in pages of 50, newest first; a bad page number gives the nearest page."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.models import Invoice
from tests.factories import ContractFactory
from tests.frontend.support import member

pytestmark = pytest.mark.django_db


def test_invoices_come_in_pages_of_fifty() -> None:
    contract = ContractFactory.create()
    for n in range(51):
        year, month = divmod(n, 12)
        start = datetime(2020 + year, month + 1, 1, tzinfo=UTC)
        Invoice.objects.create(
            contract=contract,
            tenant=contract.tenant,
            period_start=start,
            period_end=start.replace(day=28),
            currency="CNY",
            record_count=0,
            total=Decimal(n),
        )
    owner = member(contract.tenant)
    first = owner.get(reverse("portal-invoices"))
    rows = list(first.context["invoices"])
    assert len(rows) == 50 and rows[0].period_start == datetime(2024, 3, 1, tzinfo=UTC)
    assert 'data-testid="pager-next"' in first.content.decode()
    second = owner.get(reverse("portal-invoices") + "?page=2")
    assert [i.period_start for i in second.context["invoices"]] == [datetime(2020, 1, 1, tzinfo=UTC)]
    assert "Page 2 of 2" in second.content.decode()
    assert list(owner.get(reverse("portal-invoices") + "?page=x").context["invoices"]) == rows
    assert owner.get(reverse("portal-invoices") + "?page=99").context["invoices"].number == 2
