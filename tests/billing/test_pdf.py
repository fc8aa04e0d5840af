"""PDF invoices in English and Simplified Chinese with an embedded CJK font."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Membership
from billing.models import Invoice
from billing.pdf import render_invoice_pdf
from billing.selectors import invoice_with_lines
from billing.services import generate_invoice, grant_credits
from common import cjk_font
from common.periods import month_bounds
from contracts.models import ContractPrice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.billing.usage import at, send
from tests.factories import ContractFactory, TenantFactory, signing_agent
from tests.pdf_text import embedded_fonts, pdf_text

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]


def _invoice() -> int:
    tenant = TenantFactory.create(name="Acme Legal 律所")
    contract = ContractFactory.create(tenant=tenant, base_fee=Decimal("100"), tax_rate=Decimal("0.06"))
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=Decimal("0.05"))
    ContractPrice.objects.create(contract=contract, dimension="tokens_in", unit_price=Decimal("0.0000015"))
    send(contract, 7, at(2026, 11, 3))
    grant_credits(contract, Decimal("10.00"), "g1")
    return generate_invoice(contract.pk, *month_bounds("2026-11"), now=datetime(2026, 12, 2, tzinfo=UTC)).pk


@pytest.mark.parametrize(
    ("language", "words"),
    [
        ("en", ["Invoice TREEMETER-000001", "Acme Legal 律所", "Amount due", "Tax 6 %", "Base fee 2026-11"]),
        (
            "zh-Hans",
            [
                "发票 TREEMETER-000001",
                "客户: Acme Legal 律所",
                "请求数",
                "基础费 Base fee",
                "应付金额",
                "税额 6 %",
            ],
        ),
    ],
)
def test_the_pdf_has_the_lines_totals_and_chinese_text(language: str, words: list[str]) -> None:
    pdf = render_invoice_pdf(invoice_with_lines(_invoice()), language)

    assert pdf.startswith(b"%PDF")
    assert embedded_fonts(pdf) == {"WenQuanYiMicroHei"}  # the pip package's TrueType font, embedded
    text = pdf_text(pdf)
    for word in words:
        assert word in text
    # 7 × 0.05 = 0.35; 700 × 0.0000015 = 0.00105 → 0.00; base 100; tax 6 % of 100.35 = 6.02; credits 10
    for amount in ("0.35", "100.00", "100.35", "6.02", "106.37", "-10.00", "96.37 CNY"):
        assert amount in text


def test_the_pdf_endpoint_serves_staff_and_the_invoice_s_own_tenant_only(client: Client) -> None:
    pk = _invoice()
    assert client.get(f"/v1/invoices/{pk}.pdf").status_code == 401
    own, other = Client(), Client()
    own_user = get_user_model().objects.create_user("own")
    Membership.objects.create(user=own_user, tenant=Invoice.objects.get(pk=pk).tenant)
    other_user = get_user_model().objects.create_user("other")
    Membership.objects.create(user=other_user, tenant=TenantFactory.create())
    own.force_login(own_user)
    other.force_login(other_user)
    assert own.get(f"/v1/invoices/{pk}.pdf").status_code == 200
    response = other.get(f"/v1/invoices/{pk}.pdf")
    assert (response.status_code, response.json()["code"]) == (404, "invoice_not_found")
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    response = client.get(f"/v1/invoices/{pk}.pdf?lang=zh-Hans")
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    bad = client.get(f"/v1/invoices/{pk}.pdf?lang=fr")
    assert (bad.status_code, bad.json()["code"]) == (400, "unsupported_language")


def test_a_broken_font_install_answers_503_pdf_font_missing(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    pk = _invoice()
    monkeypatch.setattr(cjk_font, "FONT_PACKAGE", "no_such_font_package")  # the package gone
    monkeypatch.setattr(cjk_font, "CJK_FONT_NAME", "TreemeterCJKGone")  # and not registered yet
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    response = client.get(f"/v1/invoices/{pk}.pdf")
    assert (response.status_code, response.json()["code"]) == (503, "pdf_font_missing")
    assert "make install" in response.json()["message"]


def test_the_pdf_names_the_checkpoint_published_after_finalisation(client: Client) -> None:
    """Finalised before any checkpoint (the ledger signs one right after an invoice run): the PDF names
    the checkpoint that covers the invoice's records once it exists, as the dispute evidence does."""
    contract = ContractFactory.create()
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=Decimal("0.05"))
    agent = signing_agent(contract)
    body = agent.batch([agent.record(contract, start_ns=at(2026, 11, 3) + i) for i in range(5)]).body()
    assert client.post("/v1/ingest/batches", body, content_type="application/x-ndjson").status_code == 200
    invoice = generate_invoice(contract.pk, *month_bounds("2026-11"), now=datetime(2026, 12, 2, tzinfo=UTC))
    assert "ledger_checkpoint" not in invoice.terms
    before = pdf_text(render_invoice_pdf(invoice_with_lines(invoice.pk), "en"))
    assert "Ledger checkpoint: not yet published" in before

    checkpoint = publish_checkpoint(Checkpoint.Reason.MANUAL)

    after = pdf_text(render_invoice_pdf(invoice_with_lines(invoice.pk), "en"))
    root = base64.b64encode(bytes(checkpoint.root_hash)).decode()
    assert f"Ledger checkpoint: {checkpoint.size} / {root}" in after.replace("\n", "")
