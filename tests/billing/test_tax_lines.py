"""Taxes per invoice line (billing.taxes): several taxes per line, exclusive or inclusive, the stated
rounding rule, a breakdown by rate that adds up to the invoice's tax on the API, the portal page and both
PDFs, through generate_invoice and the batch run alike. Amounts computed by hand in the comments."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Role
from billing.models import Invoice, Issuer
from billing.pdf import render_invoice_pdf
from billing.selectors import invoice_with_lines, tax_breakdown
from billing.services import finalize_invoice, generate_invoice
from billing.tasks import run_invoices
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from tests.billing.usage import at, send
from tests.factories import ContractFactory, MembershipFactory
from tests.pdf_text import pdf_text

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
D = Decimal
NOV = month_bounds("2026-11")
DEC_9 = datetime(2026, 12, 9, tzinfo=UTC)
TAXES = [
    {"code": "vat", "name": "VAT", "rate": "0.06"},
    {"code": "surcharge", "name": "Surcharge", "rate": "0.005", "applies_to": ["usage"]},
]


def staff() -> Client:
    client = Client()
    user, _ = get_user_model().objects.get_or_create(username="ops", defaults={"is_staff": True})
    client.force_login(user)
    return client


def taxed_contract(**fields: Any) -> Contract:
    """Requests at 0.10 (10: 1.00), input tokens at 0.0123 (1,000: 12.30), a 5.00 base fee."""
    c = ContractFactory.create(base_fee=D("5.00"), **fields)
    ContractPrice.objects.create(contract=c, dimension="requests", unit_price=D("0.10"))
    ContractPrice.objects.create(contract=c, dimension="tokens_in", unit_price=D("0.0123"))
    answer = staff().put(f"/v1/contracts/{c.code}/taxes", TAXES, content_type="application/json")
    assert answer.status_code == 200, answer.content
    send(c, 10, at(2026, 11, 3))  # 100 tokens in each
    return c


def line_taxes(invoice: Invoice) -> dict[str, list[tuple[str, str]]]:
    return {
        line.dimension or line.kind: [(t["code"], t["amount"]) for t in line.details.get("taxes", [])]
        for line in invoice.lines.all()
    }


def test_exclusive_taxes_per_line_add_up_by_the_stated_rule() -> None:
    c = taxed_contract()

    invoice = invoice_with_lines(generate_invoice(c.pk, *NOV, now=DEC_9).pk)

    # VAT 6 % of 1.00, 12.30 and 5.00: 0.06 + 0.738 + 0.30 = 1.098 → 1.10; rounded down 0.06, 0.73, 0.30
    # and the cent left to the largest remainder (0.738): 0.74. The surcharge, 0.5 % of usage only:
    # 0.005 + 0.0615 = 0.0665 → 0.07; 0.00 and 0.06, the cent to 0.005's remainder: 0.01.
    assert line_taxes(invoice) == {
        "requests": [("vat", "0.06"), ("surcharge", "0.01")],
        "tokens_in": [("vat", "0.74"), ("surcharge", "0.06")],
        "base_fee": [("vat", "0.30")],
    }
    assert (invoice.subtotal, invoice.tax, invoice.total) == (D("18.30"), D("1.17"), D("19.47"))
    assert [(t.code, t.rate, t.base, t.amount) for t in tax_breakdown(invoice)] == [
        ("vat", D("0.06"), D("18.30"), D("1.10")),
        ("surcharge", D("0.005"), D("13.30"), D("0.07")),
    ]


def test_inclusive_taxes_come_out_of_the_prices() -> None:
    c = taxed_contract(tax_inclusive=True)

    invoice = invoice_with_lines(generate_invoice(c.pk, *NOV, now=DEC_9).pk)

    # A usage line holds 1 + 0.06 + 0.005 of its net: VAT is 0.06 / 1.065 of it, the surcharge 0.005 /
    # 1.065; the base fee holds 1.06: VAT 0.06 / 1.06. VAT: 0.0563 + 0.6930 + 0.2830 = 1.0323 → 1.03
    # (the cent left to 0.0563's remainder); surcharge: 0.0047 + 0.0577 = 0.0624 → 0.06 (to 0.0577).
    assert line_taxes(invoice) == {
        "requests": [("vat", "0.06"), ("surcharge", "0.00")],
        "tokens_in": [("vat", "0.69"), ("surcharge", "0.06")],
        "base_fee": [("vat", "0.28")],
    }
    assert (invoice.subtotal, invoice.tax, invoice.total) == (D("18.30"), D("1.09"), D("18.30"))


def test_the_batch_run_taxes_lines_as_generate_invoice_does() -> None:
    c = taxed_contract()

    assert run_invoices("2026-11", now=DEC_9)["finalized"] == 1
    invoice = invoice_with_lines(Invoice.objects.get(contract=c).pk)

    assert (invoice.tax, invoice.total) == (D("1.17"), D("19.47"))
    assert line_taxes(invoice)["tokens_in"] == [("vat", "0.74"), ("surcharge", "0.06")]


def test_the_breakdown_is_the_same_on_the_api_the_page_and_both_pdfs() -> None:
    c = taxed_contract()
    invoice = invoice_with_lines(generate_invoice(c.pk, *NOV, now=DEC_9).pk)
    client = Client()
    client.force_login(MembershipFactory.create(tenant=c.tenant, role=Role.READ_ONLY).user)

    api = client.get(f"/v1/invoices/{invoice.pk}").json()
    page = client.get(f"/invoices/{invoice.pk}").content.decode()
    english, chinese = (pdf_text(render_invoice_pdf(invoice, lang)) for lang in ("en", "zh-Hans"))

    assert [(t["code"], t["rate"], t["base"], t["amount"]) for t in api["tax_breakdown"]] == [
        ("vat", "0.06", "18.30", "1.10"),
        ("surcharge", "0.005", "13.30", "0.07"),
    ]
    assert "VAT 6 % on CNY 18.30" in page and "Surcharge 0.5 % on CNY 13.30" in page
    assert "VAT 6 % on 18.30\n1.10" in english and "Surcharge 0.5 % on 13.30\n0.07" in english
    assert "VAT 6 % 计税基础 18.30\n1.10" in chinese


@pytest.mark.parametrize(
    ("taxes", "message"),
    [
        ([{"code": "vat", "name": "VAT", "rate": "1.2"}], "a fraction below 1"),
        ([{"code": "vat", "name": "VAT", "rate": "0.06", "applies_to": ["gpu"]}], "unknown lines: ['gpu']"),
        ([{"code": "vat", "name": "VAT", "rate": "0.06"}] * 2, "a code of its own"),
        ([{"code": "vat", "name": "VAT", "rate": "0.06", "kind": "x"}], "only code, name, rate"),
    ],
)
def test_taxes_that_cannot_be_applied_are_refused(taxes: list[dict[str, Any]], message: str) -> None:
    c = ContractFactory.create()
    answer = staff().put(f"/v1/contracts/{c.code}/taxes", taxes, content_type="application/json")

    assert answer.status_code == 400
    assert message in str(answer.json()) and not c.taxes.exists()


def test_an_issuer_that_requires_them_prints_the_buyers_details_and_says_which_are_missing() -> None:
    Issuer.objects.create(code="treemeter", legal_name="Treemeter Cloud Ltd.", requires_buyer_details=True)
    c = taxed_contract()
    tenant = c.tenant
    tenant.legal_name, tenant.tax_id = "Acme Legal LLP", "91440000Y"
    tenant.bank_name, tenant.bank_account = "Bank of Shanghai", "6222 0000 1111"
    tenant.save()  # no address

    invoice = invoice_with_lines(finalize_invoice(generate_invoice(c.pk, *NOV, now=DEC_9)).pk)
    client = Client()
    client.force_login(MembershipFactory.create(tenant=tenant, role=Role.READ_ONLY).user)
    page = client.get(f"/invoices/{invoice.pk}").content.decode()
    english, chinese = (pdf_text(render_invoice_pdf(invoice, lang)) for lang in ("en", "zh-Hans"))

    buyer = invoice.parties["buyer"]
    assert (buyer["bank_name"], buyer["bank_account"], buyer["missing"]) == (
        "Bank of Shanghai",
        "6222 0000 1111",
        ["address"],
    )
    assert "Bank Bank of Shanghai 6222 0000 1111" in page and "Not given: address" in page
    assert "Bank Bank of Shanghai 6222 0000 1111" in english and "Not given: address" in english
    assert "开户行及账号 Bank of Shanghai 6222 0000 1111" in chinese and "未提供: 地址" in chinese


def test_an_issuer_that_does_not_require_them_prints_no_bank_details() -> None:
    c = taxed_contract()
    c.tenant.bank_name = "Bank of Shanghai"
    c.tenant.save()

    invoice = finalize_invoice(generate_invoice(c.pk, *NOV, now=DEC_9))

    assert "bank_name" not in invoice.parties["buyer"] and "missing" not in invoice.parties["buyer"]
