"""An invoice's usage charges presented as routing fee / expert fee / cache compensation (seed 000): the
same figures on the API, the portal page and both PDFs; the lines stay priced per dimension."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from accounts.models import Role
from billing.pdf import render_invoice_pdf
from billing.selectors import ChargeGroup, charge_groups, invoice_with_lines
from billing.services import generate_invoice
from common.periods import month_bounds
from contracts.models import ContractPrice
from contracts.services import set_metric
from tests.billing.usage import at, send
from tests.factories import ContractFactory, MembershipFactory
from tests.pdf_text import pdf_text

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
D = Decimal


def test_usage_lines_add_up_per_charge_group_everywhere_the_invoice_is_shown() -> None:
    c = ContractFactory.create(base_fee=D("5.00"))
    prices = {"requests": "0.10", "routing_hops": "0.01", "tokens_out": "0.002", "l2_misses": "0.30"}
    for dimension, price in prices.items():
        ContractPrice.objects.create(contract=c, dimension=dimension, unit_price=D(price))
    set_metric(c, "peak_in", "Peak input", "period_max(tokens_in)")
    ContractPrice.objects.create(contract=c, dimension="peak_in", unit_price=D("0.01"))
    send(c, 10, at(2026, 11, 3))  # each: 5 hops, 20 tokens out, 1 L2 miss, 100 tokens in
    generated = generate_invoice(c.pk, *month_bounds("2026-11"), now=datetime(2026, 12, 2, tzinfo=UTC))
    invoice = invoice_with_lines(generated.pk)

    # routing: 10 × 0.10 + 50 hops × 0.01 = 1.50; experts: 200 × 0.002 = 0.40; cache: 10 × 0.30 = 3.00;
    # other: a peak of 100 × 0.01 = 1.00. The 5.00 base fee is no usage charge.
    expected = [
        ChargeGroup("routing", D("1.50")),
        ChargeGroup("experts", D("0.40")),
        ChargeGroup("cache", D("3.00")),
        ChargeGroup("other", D("1.00")),
    ]
    assert charge_groups(invoice) == expected
    assert invoice.subtotal == D("10.90")

    member = MembershipFactory.create(tenant=c.tenant, role=Role.READ_ONLY).user
    client = Client()
    client.force_login(member)
    api = client.get(f"/v1/invoices/{invoice.pk}").json()["charge_groups"]
    page = client.get(f"/invoices/{invoice.pk}").content.decode()
    english, chinese = (pdf_text(render_invoice_pdf(invoice, language)) for language in ("en", "zh-Hans"))

    assert api == [{"group": g.group, "amount": str(g.amount)} for g in expected]
    for name, zh, group in zip(
        ("Routing fee", "Expert fee", "Cache compensation", "Other usage"),
        ("路由费", "专家费", "缓存补偿", "其他用量"),
        expected,
        strict=True,
    ):
        assert f'data-testid="charge-group-{group.group}"><td>{name}</td>' in page
        assert f"{name}\n{group.amount}" in english and f"{zh}\n{group.amount}" in chinese
