"""The verifier re-derives the lines that do not come from records (issue 21.8): the prorated base fee,
billed in advance or in arrears, the minimum-commitment true-up and the coupons' discounts, from the
export's pinned terms, and names the line that differs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.models import Coupon
from billing.services import finalize_invoice
from contracts.models import ContractPrice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.factories import ContractFactory, signing_agent
from tests.ledger.support import member_client, november_invoice, pinned_keys, send
from treemeter_verify import verify_export
from treemeter_verify.check import read_export

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
CHECK = "fees, true-up and discounts"


def _export(client: Client, **fields: Any) -> tuple[dict[str, Any], Sequence[bytes], Any]:
    contract = ContractFactory.create(**fields)
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("0.50"))
    Coupon.objects.create(contract=contract, code="WELCOME", percent_off=D("0.10"))
    Coupon.objects.create(contract=contract, code="LOYAL", amount_off=D("2.00"))
    agent = signing_agent(contract)
    start = int(datetime(2026, 11, 20, tzinfo=UTC).timestamp()) * 10**9
    send(client, agent, [agent.record(contract, start_ns=start + n * 10**9) for n in range(4)])
    invoice = finalize_invoice(november_invoice(contract))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    body = member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice.pk}/export").content
    manifest, lines = read_export(body)
    return manifest, lines, agent


def _verdict(manifest: dict[str, Any], lines: Sequence[bytes], agent: Any) -> tuple[bool, str]:
    [verdict] = [v for v in verify_export(manifest, lines, pinned_keys(agent)).verdicts if v.check == CHECK]
    return verdict.ok, verdict.detail


def test_a_prorated_fee_in_advance_a_true_up_and_two_coupons_are_re_derived(client: Client) -> None:
    manifest, lines, agent = _export(
        client,
        starts_at=datetime(2026, 11, 16, tzinfo=UTC),
        base_fee=D("30.00"),
        base_fee_timing="advance",
        minimum_commitment=D("40.00"),
    )
    # Started on 16 November: 15 of 30 days. In advance: November's fee prorated, 15.00, and December's
    # whole, 30.00. Requests 4 × 0.50 = 2.00. Committed 40.00 × 0.5 = 20.00 against 2.00 + 45.00 used:
    # no true-up. Coupons on 47.00: 10 % = 4.70, then 2.00 off the 42.30 left.
    assert [(x["kind"], x["amount"]) for x in manifest["invoice"]["lines"]] == [
        ("usage", "2.00"),
        ("base_fee", "15.00"),
        ("base_fee", "30.00"),
        ("discount", "-4.70"),
        ("discount", "-2.00"),
    ]
    assert _verdict(manifest, lines, agent) == (
        True,
        "base fee 15.00, 30.00, true-up none, 2 discounts (CNY)",
    )
    manifest["invoice"]["lines"][3]["amount"] = "-4.80"
    ok, detail = _verdict(manifest, lines, agent)
    assert (ok, detail) == (False, "coupon WELCOME: -4.80 but -4.70 on 47.00 left")


def test_a_true_up_in_arrears_is_re_derived_and_a_missing_one_is_named(client: Client) -> None:
    manifest, lines, agent = _export(client, base_fee=D("5.00"), minimum_commitment=D("60.00"))
    # Arrears: 5.00. Used 2.00 + 5.00 = 7.00 of 60.00 committed: a true-up of 53.00. Coupons on 60.00:
    # 6.00, then 2.00.
    assert [(x["kind"], x["amount"]) for x in manifest["invoice"]["lines"]] == [
        ("usage", "2.00"),
        ("base_fee", "5.00"),
        ("commitment", "53.00"),
        ("discount", "-6.00"),
        ("discount", "-2.00"),
    ]
    assert _verdict(manifest, lines, agent) == (True, "base fee 5.00, true-up 53.00, 2 discounts (CNY)")
    del manifest["invoice"]["lines"][2]
    ok, detail = _verdict(manifest, lines, agent)
    assert not ok
    assert "commitment true-up none but 60.00 committed and 7.00 used give 53.00" in detail
