"""A finalised invoice states how many records it bills and the serving agents' gaps, in its terms and
on its PDF, as they were at finalisation: a gap closing later does not change the document."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client

from billing.pdf import render_invoice_pdf
from billing.selectors import invoice_with_lines
from billing.services import finalize_invoice
from tests.factories import signing_agent
from tests.ledger.support import november_invoice, priced_contract, send
from tests.pdf_text import pdf_text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def test_the_finalised_invoice_pins_its_record_count_and_gaps(client: Client) -> None:
    contract = priced_contract()
    agent = signing_agent(contract, agent_id="agent-7")
    send(client, agent, [agent.record(contract, seq=s) for s in (0, 1, 2)])
    send(client, agent, [agent.record(contract, seq=s) for s in (6, 7)])  # 3-5 never arrived
    invoice = finalize_invoice(november_invoice(contract), now=datetime(2026, 12, 3, tzinfo=UTC))
    stated = {
        "records": 5,
        "logged_records": 5,
        "excluded_records": 0,
        "gaps": [{"agent_id": "agent-7", "first_seq": 3, "last_seq": 5}],
        "complete": False,
    }
    assert invoice.terms["completeness"] == stated

    send(client, agent, [agent.record(contract, seq=s) for s in (3, 4, 5)])  # the gap closes, late
    invoice.refresh_from_db()
    assert invoice.terms["completeness"] == stated

    english = pdf_text(render_invoice_pdf(invoice_with_lines(invoice.pk), "en"))
    assert "Records billed: 5 (in the ledger: 5, excluded: 0)" in english
    assert "Sequence gaps in the serving agents: agent-7 #3–5" in english
    chinese = pdf_text(render_invoice_pdf(invoice_with_lines(invoice.pk), "zh-Hans"))
    assert "计费记录数：5（账本中：5，已排除：0）" in chinese and "agent-7 #3–5" in chinese


def test_an_invoice_with_every_record_says_so(client: Client) -> None:
    contract = priced_contract()
    agent = signing_agent(contract, agent_id="agent-8")
    send(client, agent, [agent.record(contract, seq=s) for s in (0, 1)])
    invoice = finalize_invoice(november_invoice(contract), now=datetime(2026, 12, 3, tzinfo=UTC))
    assert invoice.terms["completeness"]["gaps"] == [] and invoice.terms["completeness"]["complete"] is True
    text = pdf_text(render_invoice_pdf(invoice_with_lines(invoice.pk), "en"))
    assert "none: every record the agents reported has arrived" in text
