"""Opening a dispute from an invoice line in the portal (billing.disputes.open_dispute): it exists with
its history and evidence, the invoice links it, and the dispute page shows both."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.models import Role
from billing.models import Dispute
from billing.services import generate_invoice
from common.periods import month_bounds
from tests.factories import MembershipFactory
from tests.frontend.support import member, november_invoice, priced_contract, signed_in

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def test_a_dispute_opened_from_a_line_over_htmx_exists_with_its_history_and_evidence() -> None:
    contract = priced_contract()
    invoice = november_invoice(contract, records=4)
    line = invoice.lines.get(dimension="requests")
    user = MembershipFactory.create(tenant=contract.tenant, role=Role.BILLING).user
    billing = signed_in(user)
    url = reverse("portal-dispute-line", kwargs={"pk": invoice.pk, "line_pk": line.pk})

    form = billing.get(url, HTTP_HX_REQUEST="true")
    assert form.status_code == 200
    assert f'data-testid="dispute-form-{line.pk}"' in form.content.decode()
    assert "<html" not in form.content.decode()

    opened = billing.post(url, {"reason": "We sent 3 requests, not 4"}, HTTP_HX_REQUEST="true")
    assert opened.status_code == 200
    [dispute] = Dispute.objects.all()
    assert f'href="/disputes/{dispute.pk}" data-testid="dispute-opened"' in opened.content.decode()
    assert (dispute.line, dispute.invoice, dispute.tenant, dispute.status, dispute.reason) == (
        line,
        invoice,
        contract.tenant,
        "open",
        "We sent 3 requests, not 4",
    )
    assert [(e.action, e.actor) for e in dispute.events.order_by("id")] == [
        ("opened", user),
        ("evidence_attached", None),
    ]
    assert dispute.evidence["records"] == 4

    page = billing.get(reverse("portal-dispute", kwargs={"pk": dispute.pk})).content.decode()
    assert (
        'data-testid="dispute-event-opened"' in page
        and 'data-testid="dispute-event-evidence_attached"' in page
    )
    assert 'data-testid="evidence-records">4<' in page
    assert dispute.evidence["leaf_hashes_sha256"] in page
    invoice_page = billing.get(reverse("portal-invoice", kwargs={"pk": invoice.pk})).content.decode()
    assert f'data-testid="line-dispute-{line.pk}"' in invoice_page
    assert f'data-testid="dispute-button-{line.pk}"' not in invoice_page


def test_without_htmx_the_form_posts_and_redirects_to_the_dispute_and_errors_show_in_the_form() -> None:
    contract = priced_contract()
    invoice = november_invoice(contract)
    line = invoice.lines.get(dimension="tokens_in")
    owner = member(contract.tenant, Role.OWNER, language="zh-hans")
    url = reverse("portal-dispute-line", kwargs={"pk": invoice.pk, "line_pk": line.pk})

    empty = owner.post(url, {"reason": "  "})
    assert empty.status_code == 400
    assert 'data-testid="dispute-error">Say why the line is disputed.<' in empty.content.decode()
    opened = owner.post(url, {"reason": "double counted"})
    dispute = Dispute.objects.get()
    assert (opened.status_code, opened["Location"]) == (
        302,
        reverse("portal-dispute", kwargs={"pk": dispute.pk}),
    )
    again = owner.post(url, {"reason": "again"}, HTTP_HX_REQUEST="true")
    assert again.status_code == 200  # htmx swaps only 2xx: the form comes back with the message
    assert "already has an open dispute" in again.content.decode()
    assert Dispute.objects.count() == 1
    page = owner.get(reverse("portal-dispute", kwargs={"pk": dispute.pk})).content.decode()
    assert "处理中" in page and "double counted" in page  # status "open" in Chinese


def test_an_invoice_in_its_grace_period_has_no_dispute_buttons_and_refuses_one() -> None:
    contract = priced_contract(grace_days=3650)
    draft = generate_invoice(contract.pk, *month_bounds("2026-10"))
    assert draft.status == "grace"
    line = draft.lines.get(dimension="requests")
    owner = member(contract.tenant)
    page = owner.get(reverse("portal-invoice", kwargs={"pk": draft.pk})).content.decode()
    assert "dispute-button-" not in page
    url = reverse("portal-dispute-line", kwargs={"pk": draft.pk, "line_pk": line.pk})
    refused = owner.post(url, {"reason": "not final"})
    assert refused.status_code == 409 and f"Invoice {draft.pk} is grace." in refused.content.decode()
    assert Dispute.objects.count() == 0
