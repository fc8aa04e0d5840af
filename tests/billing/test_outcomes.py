"""Outcome-based fees: declared in records or the API, pending for the verification window, confirmed
or revoked by the customer, the contract's rule or the window's end; only confirmed outcomes billed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from billing.models import Outcome
from billing.outcomes import decide_outcome, declare_outcome
from billing.services import generate_invoice
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from pricing.errors import BillingError
from tests.billing.usage import at, send
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
D = Decimal
OCT, NOV = month_bounds("2026-10"), month_bounds("2026-11")
NOV_2, DEC_2 = datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC)


def outcome_contract(**terms: Any) -> Contract:
    contract = ContractFactory.create(**terms)
    ContractPrice.objects.create(contract=contract, dimension="outcomes", unit_price=D("2000"))
    return contract


def patient(ref: str, **extra: Any) -> dict[str, Any]:
    return {"type": "matched_patient", "value": "2000.00", "ref": ref, **extra}


def outcome_line(invoice: Any) -> tuple[Decimal, Decimal, list[str]]:
    line = invoice.lines.get(dimension="outcomes")
    return line.quantity, line.amount, line.details["outcomes"]


def test_confirmed_revoked_and_expiring_outcomes() -> None:
    c = outcome_contract()  # 72 h window, confirmed when it closes
    send(c, 1, at(2026, 10, 5), outcome=patient("p-1"))
    send(c, 1, at(2026, 10, 6), outcome=patient("p-2"))
    send(c, 1, at(2026, 10, 7), outcome=patient("p-3"))
    send(c, 1, at(2026, 10, 30), outcome=patient("p-4"))  # its window ends on 2 November
    invoice_day = datetime(2026, 10, 31, 12, tzinfo=UTC)
    generate_invoice(c.pk, *month_bounds("2026-09"), now=invoice_day)  # nothing in September
    # The records' outcomes are declared when their period is invoiced; the customer acts meanwhile.
    october = generate_invoice(c.pk, *OCT, now=NOV_2 - timedelta(hours=1))
    # p-1 … p-3 were confirmed when their windows closed in October; p-4's is still open.
    assert october.status == "finalized"
    assert outcome_line(october) == (D(3), D("6000.00"), ["p-1", "p-2", "p-3"])

    p3 = Outcome.objects.get(ref="p-3")
    assert (p3.status, p3.decided_by, p3.window_ends_at) == (
        "confirmed",
        "expiry",
        datetime(2026, 10, 10, tzinfo=UTC),
    )
    p4 = Outcome.objects.get(ref="p-4")
    assert p4.status == "pending"
    decide_outcome(p4, confirm=False, now=datetime(2026, 11, 1, tzinfo=UTC), reason="not a match")

    november = generate_invoice(c.pk, *NOV, now=DEC_2)
    assert outcome_line(november) == (D(0), D("0.00"), [])
    assert Outcome.objects.get(ref="p-4").status == "revoked"


def test_the_customer_confirms_within_the_window_and_revoking_after_billing_issues_a_credit_note() -> None:
    c = outcome_contract(outcome_on_expiry="revoke", outcome_window_hours=24 * 40)
    declared = declare_outcome(c, "case-17", "matched_patient", D("2000"), datetime(2026, 11, 3, tzinfo=UTC))
    assert declare_outcome(c, "case-17", "matched_patient", D("9"), NOV_2).pk == declared.pk  # same ref
    declare_outcome(c, "case-18", "matched_patient", D("2000"), datetime(2026, 11, 3, tzinfo=UTC))

    decide_outcome(declared, confirm=True, now=datetime(2026, 11, 20, tzinfo=UTC))
    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)
    assert outcome_line(invoice) == (D(1), D("2000.00"), ["case-17"])  # case-18 still pending

    revoked = decide_outcome(
        declared, confirm=False, now=datetime(2026, 12, 5, tzinfo=UTC), reason="duplicate"
    )
    assert revoked.credit_note is not None
    assert (revoked.credit_note.amount, revoked.credit_note.number) == (D("2000.00"), f"{invoice.number}-CN1")
    assert revoked.credit_note.line_id == invoice.lines.get(dimension="outcomes").pk
    with pytest.raises(BillingError) as raised:
        decide_outcome(revoked, confirm=True, now=datetime(2026, 12, 6, tzinfo=UTC))
    assert raised.value.code == "outcome_revoked"

    late = Outcome.objects.get(ref="case-18")
    with pytest.raises(BillingError) as raised:
        decide_outcome(late, confirm=True, now=datetime(2026, 12, 14, tzinfo=UTC))  # window closed on 13 Dec
    assert raised.value.code == "window_closed"
    december = generate_invoice(c.pk, *month_bounds("2026-12"), now=datetime(2027, 1, 2, tzinfo=UTC))
    assert outcome_line(december) == (D(0), D("0.00"), [])
    assert Outcome.objects.get(ref="case-18").status == "revoked"  # the contract revokes on expiry


def test_a_verification_rule_over_quality_and_the_period_p99_confirms_at_once() -> None:
    c = outcome_contract(
        outcome_rule="outcome_f1 >= 0.92 and p99_latency_ms <= 300", outcome_on_expiry="revoke"
    )
    send(c, 1, at(2026, 11, 5), outcome=patient("good", f1="0.95"))  # 150 ms latency each
    send(c, 1, at(2026, 11, 5), outcome=patient("weak", f1="0.90"))
    send(c, 1, at(2026, 11, 5), outcome=patient("no-score"))

    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert outcome_line(invoice) == (D(1), D("2000.00"), ["good"])
    line = invoice.lines.get()
    assert line.description == "Verified outcomes (verified: outcome_f1 >= 0.92 and p99_latency_ms <= 300)"
    assert invoice.terms["outcome_rule"] == "outcome_f1 >= 0.92 and p99_latency_ms <= 300"
    assert dict(Outcome.objects.values_list("ref", "decided_by")) == {
        "good": "rule",
        "weak": "expiry",
        "no-score": "expiry",
    }


def test_a_slow_period_fails_the_rule() -> None:
    c = outcome_contract(
        outcome_rule="outcome_f1 >= 0.92 and p99_latency_ms <= 300", outcome_on_expiry="revoke"
    )
    send(c, 1, at(2026, 11, 5), outcome=patient("good", f1="0.95"))
    send(c, 5, at(2026, 11, 5), end_ns=at(2026, 11, 5) + 900_000_000)  # 900 ms: p99 above 300 ms

    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert outcome_line(invoice) == (D(0), D("0.00"), [])


def test_a_share_of_confirmed_outcome_value() -> None:
    c = ContractFactory.create(outcome_window_hours=1)
    ContractPrice.objects.create(
        contract=c, dimension="outcomes", charge_model="percentage", properties={"rate": "0.15"}
    )
    send(c, 3, at(2026, 11, 7), outcome={"type": "matched_patient", "value": "2000.00"})  # refs: record ids

    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)

    line = invoice.lines.get()
    assert (line.quantity, line.amount, line.details["value"]) == (D(3), D("900.00"), "6000.000000")


def test_a_share_above_the_package_quota() -> None:
    c = ContractFactory.create(outcome_window_hours=1)
    ContractPrice.objects.create(
        contract=c,
        dimension="outcomes",
        charge_model="percentage",
        properties={"rate": "0.15"},
        included_quantity=2,
    )
    send(c, 5, at(2026, 11, 7), outcome={"type": "matched_patient", "value": "2000.00"})

    line = generate_invoice(c.pk, *NOV, now=DEC_2).lines.get()

    assert (line.quantity, line.amount, line.details["billable"]) == (
        D(5),
        D("900.00"),
        "3",
    )  # 15 % of 3 × 2,000
