"""The portal's PDF links: the file as an attachment in the page's language, or a page with the reason
(never a JSON error the browser drops without a word)."""

from __future__ import annotations

import pytest
from django.urls import reverse

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
