"""The portal's PDF links: the file as an attachment in the page's language, or a page with the reason
(never a JSON error the browser drops without a word)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from billing.settlement import issue_note
from common import cjk_font
from tests.frontend.support import member, november_invoice, priced_contract
from tests.pdf_text import pdf_text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def test_the_invoice_pdf_is_an_attachment_in_the_pages_language() -> None:
    contract = priced_contract()
    invoice = november_invoice(contract)
    url = reverse("portal-invoice-pdf", kwargs={"pk": invoice.pk})
    english = member(contract.tenant).get(url)
    assert english["Content-Type"] == "application/pdf"
    assert english["Content-Disposition"] == f'attachment; filename="invoice-{invoice.number}-en.pdf"'
    assert "Amount due" in pdf_text(english.content)
    chinese = member(contract.tenant, language="zh-hans").get(url)
    assert chinese["Content-Disposition"].endswith('-zh-Hans.pdf"')
    assert "应付金额" in pdf_text(chinese.content)
    other = member(priced_contract().tenant).get(url)
    assert other.status_code == 404


def test_a_pdf_that_cannot_be_made_is_a_page_that_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    contract = priced_contract()
    invoice = november_invoice(contract)

    monkeypatch.setattr(cjk_font, "FONT_PACKAGE", "no_such_font_package")  # the package gone
    monkeypatch.setattr(cjk_font, "CJK_FONT_NAME", "TreemeterCJKGone")  # and not registered yet
    response = member(contract.tenant).get(reverse("portal-invoice-pdf", kwargs={"pk": invoice.pk}))

    assert response.status_code == 503 and response["Content-Type"].startswith("text/html")
    text = response.content.decode()
    assert 'data-code="pdf_font_missing"' in text
    assert "The PDF font is missing" in text and "make install" in text
    assert reverse("portal-invoice", kwargs={"pk": invoice.pk}) in text


def test_credit_and_debit_notes_have_their_pdf_in_both_languages() -> None:
    contract = priced_contract()
    invoice = november_invoice(contract, records=30)  # 30 requests, 10 included: 1.00 on requests
    line = invoice.lines.get(dimension="requests")
    credit = issue_note(invoice, "credit", Decimal("0.40"), "two requests failed", line=line)
    debit = issue_note(invoice, "debit", Decimal("0.25"), "late records")
    owner = member(contract.tenant)
    english = pdf_text(owner.get(reverse("portal-note-pdf", kwargs={"pk": credit.pk}) + "?lang=en").content)
    assert f"Credit note {credit.number}" in english and "two requests failed" in english
    assert "Amount: -0.40 CNY" in english and f"Corrects invoice: {invoice.number}" in english
    invoice.refresh_from_db()
    assert f"Amount due on the invoice after its credit notes: {invoice.amount_due:,} CNY" in english
    chinese = owner.get(reverse("portal-note-pdf", kwargs={"pk": debit.pk}) + "?lang=zh-Hans")
    assert chinese["Content-Disposition"] == f'attachment; filename="note-{debit.number}-zh-Hans.pdf"'
    text = pdf_text(chinese.content)
    assert f"借项通知单 {debit.number}" in text and "单独收取" in text
    assert (
        member(priced_contract().tenant).get(reverse("portal-note-pdf", kwargs={"pk": debit.pk})).status_code
        == 404
    )
