"""Rating honours exclusions: SLA customer-dependency windows (when the contract pauses billing for
them) and ledger BillingExclusions; exact amounts through the real ingest path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from billing.models import BillingExclusion, Dispute, Invoice, Note
from billing.services import generate_invoice
from common.periods import month_bounds
from sla.models import Exclusion
from sla.services import declare_exclusion
from tests.factories import ContractFactory, ContractPriceFactory, SigningAgent, signing_agent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
NOV = month_bounds("2026-11")
OUTAGE = datetime(2026, 11, 20, 10, tzinfo=UTC)
DURING_GRACE = NOV[1] + timedelta(days=1)


def _ns(instant: datetime) -> int:
    return int(instant.timestamp()) * 10**9


def _contract(**kwargs: Any) -> Any:
    contract = ContractFactory.create(grace_days=5, **kwargs)
    ContractPriceFactory.create(contract=contract, dimension="requests", unit_price=Decimal("0.05"))
    ContractPriceFactory.create(contract=contract, dimension="tokens_in", unit_price=Decimal("0.0002"))
    return contract


def _send(agent: SigningAgent, records: list[dict[str, Any]]) -> None:
    response = Client().post(
        "/v1/ingest/batches", data=agent.batch(records).body(), content_type="application/x-ndjson"
    )
    assert response.status_code == 200, response.content


def _usage(contract: Any) -> dict[str, Any]:
    """5 ordinary records on Nov 3; 3 served and 1 failed in the customer's outage on Nov 20."""
    agent = signing_agent(contract)
    ordinary = [agent.record(contract, start_ns=_ns(datetime(2026, 11, 3, tzinfo=UTC))) for _ in range(5)]
    outage = [agent.record(contract, start_ns=_ns(OUTAGE) + k * 60 * 10**9) for k in range(3)]
    failed = [agent.record(contract, start_ns=_ns(OUTAGE) + 300 * 10**9, status="error")]
    _send(agent, [*ordinary, *outage, *failed])
    return {"agent": agent, "ordinary": ordinary, "outage": outage, "failed": failed}


def _his_outage(contract: Any, scope: str = Exclusion.Scope.ALL) -> Exclusion:
    ops = User.objects.create_user(f"ops-{contract.code}", password="pw", is_staff=True)
    exclusion, _ = declare_exclusion(
        contract,
        kind=Exclusion.Kind.CUSTOMER_DEPENDENCY,
        scope=scope,
        starts_at=OUTAGE,
        ends_at=OUTAGE + timedelta(minutes=10),
        reason="The customer's HIS answered 503",
        declared_by=ops,
    )
    return exclusion


def _amounts(invoice: Invoice) -> dict[str, tuple[Decimal, Decimal]]:
    return {line.dimension: (line.quantity, line.amount) for line in invoice.lines.filter(kind="usage")}


def test_a_customer_dependency_window_pauses_billing_when_the_contract_says_so() -> None:
    contract = _contract(pause_billing_on_customer_dependency=True)
    _usage(contract)
    exclusion = _his_outage(contract)

    invoice = generate_invoice(contract.pk, *NOV, now=DURING_GRACE)

    # 8 served records, 3 of them in the window: 5 × 0.05; 500 tokens × 0.0002
    assert _amounts(invoice) == {
        "requests": (Decimal(5), Decimal("0.25")),
        "tokens_in": (Decimal(500), Decimal("0.10")),
    }
    assert (invoice.record_count, invoice.total) == (9, Decimal("0.35"))
    assert invoice.terms["exclusions"] == {
        "records": 4,  # the failed one in the window too (it was not billable anyway)
        "by_dispute": 0,
        "by_sla_pause": 4,
        "by_retry": 0,
        "disputes": [],
        "sla_exclusions": [
            {
                "id": exclusion.pk,
                "scope": "all",
                "starts_at": "2026-11-20T10:00:00+00:00",
                "ends_at": "2026-11-20T10:10:00+00:00",
                "reason": "The customer's HIS answered 503",
            }
        ],
    }


def test_without_the_pause_term_the_window_is_billed() -> None:
    contract = _contract()
    _usage(contract)
    _his_outage(contract)

    invoice = generate_invoice(contract.pk, *NOV, now=DURING_GRACE)

    assert _amounts(invoice) == {
        "requests": (Decimal(8), Decimal("0.40")),
        "tokens_in": (Decimal(800), Decimal("0.16")),
    }
    assert "exclusions" not in invoice.terms


def test_a_failed_only_window_pauses_only_the_failed_requests() -> None:
    contract = _contract(pause_billing_on_customer_dependency=True)
    _usage(contract)
    _his_outage(contract, Exclusion.Scope.FAILED)

    invoice = generate_invoice(contract.pk, *NOV, now=DURING_GRACE)

    assert _amounts(invoice)["requests"] == (Decimal(8), Decimal("0.40"))
    assert (invoice.terms["exclusions"]["records"], invoice.terms["exclusions"]["by_sla_pause"]) == (1, 1)


def test_another_contracts_window_pauses_nothing_here() -> None:
    paused, other = (_contract(pause_billing_on_customer_dependency=True) for _ in range(2))
    _usage(paused)
    _his_outage(other)

    invoice = generate_invoice(paused.pk, *NOV, now=DURING_GRACE)

    assert _amounts(invoice)["requests"] == (Decimal(8), Decimal("0.40"))


def test_a_ledger_billing_exclusion_leaves_a_later_drafts_rating() -> None:
    contract = _contract()
    usage = _usage(contract)
    draft = generate_invoice(contract.pk, *NOV, now=DURING_GRACE)
    assert _amounts(draft)["requests"] == (Decimal(8), Decimal("0.40"))
    # Disputes open on finalised invoices (a line in dispute is protected): this one is October's.
    october = generate_invoice(contract.pk, *month_bounds("2026-10"), now=DURING_GRACE)
    dispute = Dispute.objects.create(
        invoice=october,
        line=october.lines.get(dimension="requests"),
        tenant=contract.tenant,
        reason="503",
        evidence={},
    )
    for record in usage["outage"][:2]:
        BillingExclusion.objects.create(
            dispute=dispute,
            record_id=record["record_id"],
            tenant=contract.tenant.code,
            contract=contract.code,
            start_ns=record["start_ns"],
        )

    again = generate_invoice(contract.pk, *NOV, now=DURING_GRACE + timedelta(hours=1))

    assert again.pk == draft.pk
    assert _amounts(again) == {
        "requests": (Decimal(6), Decimal("0.30")),
        "tokens_in": (Decimal(600), Decimal("0.12")),
    }
    excluded = again.terms["exclusions"]
    assert (excluded["records"], excluded["by_dispute"], excluded["disputes"]) == (2, 2, [dispute.pk])


def test_records_credited_by_a_dispute_are_not_credited_again_by_a_later_invoice() -> None:
    """The dispute's credit note paid for the excluded records of the finalised November invoice; a late
    November record is still billed in December's adjustment, not swallowed by the exclusion."""
    contract = _contract()
    usage = _usage(contract)
    november = generate_invoice(contract.pk, *NOV, now=NOV[1] + timedelta(days=6))
    assert november.status == Invoice.Status.FINALIZED and november.finalized_at is not None
    dispute = Dispute.objects.create(
        invoice=november,
        line=november.lines.get(dimension="requests"),
        tenant=contract.tenant,
        reason="503",
        evidence={},
    )
    BillingExclusion.objects.create(
        dispute=dispute,
        record_id=usage["outage"][0]["record_id"],
        tenant=contract.tenant.code,
        contract=contract.code,
        start_ns=usage["outage"][0]["start_ns"],
    )
    # resolved after November was finalised (the test's clock runs ahead of the wall clock)
    BillingExclusion.objects.update(created_at=november.finalized_at + timedelta(days=2))
    Note.objects.create(
        invoice=november, kind="credit", number="CN1", reason="dispute", amount=Decimal("0.07")
    )
    agent: SigningAgent = usage["agent"]
    _send(agent, [agent.record(contract, start_ns=_ns(datetime(2026, 11, 28, tzinfo=UTC)))])  # late

    december = generate_invoice(contract.pk, *month_bounds("2026-12"), now=datetime(2027, 1, 7, tzinfo=UTC))

    adjustments = {
        line.dimension: (line.quantity, line.amount) for line in december.lines.filter(kind="adjustment")
    }
    assert adjustments == {
        "requests": (Decimal(1), Decimal("0.05")),
        "tokens_in": (Decimal(100), Decimal("0.02")),
    }
    assert Invoice.objects.get(pk=november.pk).total == november.total  # finalised: never changes
