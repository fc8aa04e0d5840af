"""The invoice page says what a customer would otherwise ask: which days it covers, and why it bills
fewer requests than it has records."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.test import Client
from django.utils import translation

from billing.models import Issuer
from billing.pdf import render_invoice_pdf
from billing.selectors import invoice_with_lines
from billing.services import finalize_invoice, generate_invoice
from common.periods import month_bounds
from frontend.templatetags.portal import period
from tests.factories import signing_agent
from tests.frontend.support import member, priced_contract
from tests.pdf_text import pdf_text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def test_a_month_reads_as_its_first_and_last_day_and_seconds_with_their_times() -> None:
    with translation.override("en"):
        assert period(*month_bounds("2026-11")) == "11/01/2026 – 11/30/2026 (UTC)"
        day = datetime(2026, 12, 3, tzinfo=UTC)
        assert period(day, datetime(2026, 12, 4, tzinfo=UTC)) == "12/03/2026 (UTC)"
        seventeen = (datetime(2026, 12, 3, 9, 0, 5, tzinfo=UTC), datetime(2026, 12, 3, 9, 0, 22, tzinfo=UTC))
        assert period(*seventeen) == "12/03/2026 09:00:05 – 09:00:22 UTC"


def test_the_page_says_how_many_records_are_not_billed(client: Client) -> None:
    contract = priced_contract()
    agent = signing_agent(contract)
    start = int(datetime(2026, 11, 15, tzinfo=UTC).timestamp()) * 10**9
    records = [agent.record(contract, start_ns=start + i * 10**9) for i in range(30)]
    records.append(agent.record(contract, start_ns=start + 31 * 10**9, status="rejected"))
    body = agent.batch(records).body()
    assert client.post("/v1/ingest/batches", body, content_type="application/x-ndjson").status_code == 200
    invoice = finalize_invoice(generate_invoice(contract.pk, *month_bounds("2026-11")))
    assert (invoice.record_count, invoice.unbilled_records) == (31, 1)

    page = member(contract.tenant).get(f"/invoices/{invoice.pk}").content.decode()

    said_match = re.search(r'data-testid="invoice-records">(.*?)</p>', page, re.S)
    assert said_match is not None
    said = said_match.group(1)
    assert "31 usage records in this period." in said
    assert "1 of them is not billed: it failed, was rejected or was excluded." in said
    assert re.search(r'data-testid="invoice-period">11/01/2026 – 11/30/2026 \(UTC\)<', page)


def test_a_final_invoice_names_both_parties_its_dates_and_payment_status(client: Client) -> None:
    Issuer.objects.create(
        code="treemeter",
        legal_name="Treemeter Cloud Ltd.",
        address="1 Harbour Rd\nShanghai",
        tax_id="91310000X",
    )
    contract = priced_contract(payment_terms_days=15)
    tenant = contract.tenant
    tenant.legal_name, tenant.address, tenant.tax_id = "Acme Legal LLP", "9 Court St", "91440000Y"
    tenant.save()
    agent = signing_agent(contract)
    start = int(datetime(2026, 11, 15, tzinfo=UTC).timestamp()) * 10**9
    body = agent.batch([agent.record(contract, start_ns=start)]).body()
    assert client.post("/v1/ingest/batches", body, content_type="application/x-ndjson").status_code == 200
    issued = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)
    invoice = generate_invoice(contract.pk, *month_bounds("2026-11"), now=issued)
    tenant.address = "moved since"  # the invoice keeps what it was issued with
    tenant.save()

    assert invoice.parties["due_on"] == "2026-12-17" and invoice.payment_status in ("due", "overdue")
    page = member(tenant).get(f"/invoices/{invoice.pk}").content.decode()
    issuer = re.search(r'data-testid="invoice-issuer">(.*?)</div>', page, re.S)
    buyer = re.search(r'data-testid="invoice-buyer">(.*?)</div>', page, re.S)
    assert issuer is not None and "Treemeter Cloud Ltd." in issuer.group(1) and "91310000X" in issuer.group(1)
    assert buyer is not None and "Acme Legal LLP" in buyer.group(1) and "9 Court St" in buyer.group(1)
    assert 'data-testid="invoice-due">12/17/2026<' in page and "(15 days)" in page

    text = pdf_text(render_invoice_pdf(invoice_with_lines(invoice.pk), "zh-Hans"))
    assert "开票方: Treemeter Cloud Ltd." in text and "纳税人识别号 91440000Y" in text
    assert "到期日: 2026-12-17" in text and "付款期限 15 天" in text
