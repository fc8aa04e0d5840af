"""`make run` end to end: a real agent serves several tenants; the invoices come from its records."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from billing.models import Invoice
from clickhouse_store import query

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db(transaction=True)]


def test_run_demo_invoices_what_the_agent_served() -> None:
    out = StringIO()
    call_command("run_demo", "--no-serve", "--port", "0", "--requests", "8", stdout=out)
    text = out.getvalue()
    assert "8 × HTTP 200, 1 × HTTP 400, 1 × HTTP 401" in text
    rows = query.select(
        f"SELECT contract, count(), countIf(status = 'ok') FROM {query.RECORDS} GROUP BY contract"
    )
    stored = {contract: (records, served) for contract, records, served in rows}
    # Keys cycle over acme (gold, standard), st-mary (gold), nova (batch); the malformed request is acme's.
    assert stored == {
        "acme-legal-review-2026": (5, 4),
        "st-mary-matching-2026": (2, 2),
        "nova-batch-2026": (2, 2),
    }
    invoices = {i.contract.code: i.record_count for i in Invoice.objects.select_related("contract")}
    assert invoices == {code: records for code, (records, _) in stored.items()}
    assert "records all invoiced" in text
