"""The verifier re-derives the invoice's subtotal, tax and total (issue 21.8): per-line taxes, several per
line, exclusive or inclusive, by the stated rounding rule, or the single rate on the subtotal; with its own
code, held to the platform's by a differential property."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.services import finalize_invoice
from billing.taxes import TaxedLine, TaxTerms
from billing.taxes import line_taxes as platform_line_taxes
from contracts.models import ContractPrice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.factories import ContractFactory, signing_agent
from tests.ledger.support import member_client, november_invoice, pinned_keys, send
from treemeter_verify import verify_export
from treemeter_verify.check import read_export
from treemeter_verify.taxes import line_taxes as verifier_line_taxes

D = Decimal
TAXES = [
    {"code": "vat", "name": "VAT", "rate": "0.06"},
    {"code": "surcharge", "name": "Surcharge", "rate": "0.005", "applies_to": ["usage"]},
]


def _export(client: Client, **contract_fields: Any) -> tuple[dict[str, Any], Sequence[bytes], Any]:
    """Requests at 0.10 and input tokens at 0.0123 over 10 records (100 tokens in each), a 5.00 base fee."""
    contract = ContractFactory.create(base_fee=D("5.00"), **contract_fields)
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("0.10"))
    ContractPrice.objects.create(contract=contract, dimension="tokens_in", unit_price=D("0.0123"))
    if "tax_rate" not in contract_fields:
        staff = Client()
        staff.force_login(get_user_model().objects.create_user("ops", is_staff=True))
        answer = staff.put(f"/v1/contracts/{contract.code}/taxes", TAXES, content_type="application/json")
        assert answer.status_code == 200, answer.content
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract) for _ in range(10)])
    invoice = finalize_invoice(november_invoice(contract))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    manifest, lines = read_export(
        member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice.pk}/export").content
    )
    return manifest, lines, agent


def _totals(report: Any) -> tuple[bool, str]:
    [verdict] = [v for v in report.verdicts if v.check == "invoice totals"]
    return verdict.ok, verdict.detail


@pytest.mark.django_db
@pytest.mark.usefixtures("clickhouse")
def test_per_line_taxes_are_re_derived_and_a_changed_tax_is_named(client: Client) -> None:
    manifest, lines, agent = _export(client)
    # As tests/billing/test_tax_lines.py computes by hand: 18.30 + VAT 1.10 + surcharge 0.07 = 19.47.
    assert _totals(verify_export(manifest, lines, pinned_keys(agent))) == (
        True,
        "subtotal 18.30 + tax 1.17 (2 taxes per line, added) = total 19.47 CNY",
    )
    line = next(x for x in manifest["invoice"]["lines"] if x["dimension"] == "tokens_in")
    assert line["taxes"] == [
        {"code": "vat", "rate": "0.06", "amount": "0.74"},
        {"code": "surcharge", "rate": "0.005", "amount": "0.06"},
    ]
    line["taxes"][0]["amount"] = "0.73"
    manifest["invoice"]["tax"], manifest["invoice"]["total"] = "1.18", "19.48"
    ok, detail = _totals(verify_export(manifest, lines, pinned_keys(agent)))
    assert not ok
    assert (
        "line 2 (usage tokens_in) states taxes vat 0.73, surcharge 0.06 "
        "but its terms give vat 0.74, surcharge 0.06" in detail
    )
    assert "tax 1.18 CNY but the terms give 1.17 (off by 0.01 CNY)" in detail


@pytest.mark.django_db
@pytest.mark.usefixtures("clickhouse")
def test_the_single_rate_inclusive_or_not_is_re_derived(client: Client) -> None:
    manifest, lines, agent = _export(client, tax_rate=D("0.06"), tax_inclusive=True)
    # Inclusive: 18.30 × 0.06 / 1.06 = 1.0358… → 1.04, and the total is the subtotal.
    assert _totals(verify_export(manifest, lines, pinned_keys(agent))) == (
        True,
        "subtotal 18.30 + tax 1.04 (0.06 on the subtotal, included in the prices) = total 18.30 CNY",
    )
    manifest["invoice"]["total"] = "19.34"  # as if the tax were added on top
    assert _totals(verify_export(manifest, lines, pinned_keys(agent))) == (
        False,
        "total 19.34 CNY but subtotal and tax give 18.30",
    )


AMOUNTS = st.decimals(min_value=D("-50"), max_value=D("500"), places=2, allow_nan=False, allow_infinity=False)
KINDS = st.sampled_from([("usage", "requests"), ("usage", "tokens_in"), ("base_fee", ""), ("discount", "")])
TAX = st.tuples(
    st.decimals(min_value=D("0"), max_value=D("0.25"), places=3),
    st.sampled_from([[], ["usage"], ["base_fee", "tokens_in"]]),
)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.tuples(AMOUNTS, KINDS), min_size=1, max_size=8),
    taxes=st.lists(TAX, min_size=1, max_size=3),
    inclusive=st.booleans(),
    currency=st.sampled_from(["CNY", "JPY"]),
)
def test_the_verifiers_tax_rule_is_the_platforms(
    lines: list[tuple[Decimal, tuple[str, str]]],
    taxes: list[tuple[Decimal, list[str]]],
    inclusive: bool,
    currency: str,
) -> None:
    amounts = [a.quantize(D(1)) if currency == "JPY" else a for a, _ in lines]
    terms = [TaxTerms(f"t{k}", f"tax {k}", str(rate), tuple(scope)) for k, (rate, scope) in enumerate(taxes)]
    taxed = [TaxedLine(a, kind, dimension) for a, (_, (kind, dimension)) in zip(amounts, lines, strict=True)]
    shares, total = platform_line_taxes(terms, taxed, inclusive, currency)
    exported = [{"amount": str(t.amount), "kind": t.kind, "dimension": t.dimension} for t in taxed]
    again, verifier_total = verifier_line_taxes([t.as_json() for t in terms], exported, inclusive, currency)
    assert verifier_total == total
    assert again == [[(t.code, t.amount) for t in line] for line in shares]
