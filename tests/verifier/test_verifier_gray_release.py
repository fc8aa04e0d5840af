"""A real export of an invoice with gray usage (issue 19.4): the records of a gray-release stage with
billing off are in the export, the export states the stage's window, and `treemeter-verify` leaves
them out of the re-rated lines as the platform did; without the window the line no longer verifies."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client

from accounts.access import PLATFORM
from billing.services import finalize_invoice
from contracts.models import ContractPrice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from releases.services import evaluate_release_gates, promote_plan
from tests.factories import signing_agent
from tests.ledger.support import member_client, november_invoice, pinned_keys, send
from tests.releases.gray_story import DAY_1, DAY_2, calls, review_contract, three_stages
from treemeter_verify import verify_export
from treemeter_verify.check import read_export

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def test_gray_usage_is_left_out_of_the_verified_lines_and_its_window_is_needed() -> None:
    contract = review_contract("verified-gray")
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=Decimal("0.05"))
    ContractPrice.objects.create(contract=contract, dimension="tokens_in", unit_price=Decimal("0.0002"))
    agent = signing_agent(contract)
    plan = three_stages(contract)
    send(Client(), agent, calls(agent, contract, "ocr", DAY_1 + timedelta(hours=9), 12))  # gray, day 1
    promote_plan(plan=plan, principal=PLATFORM, now=DAY_2)
    day_2 = calls(agent, contract, "clauses", DAY_2 + timedelta(minutes=5), 20, outcome={"f1": "0.95"})
    send(Client(), agent, day_2)  # gray too
    assert evaluate_release_gates(DAY_2 + timedelta(hours=1)) == {plan.code: "passed"}
    send(Client(), agent, calls(agent, contract, "ocr", DAY_2 + timedelta(hours=2), 5))  # billed, day 3 stage
    invoice = finalize_invoice(november_invoice(contract))
    assert invoice.lines.get(dimension="requests").quantity == Decimal(5)
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    body = member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice.pk}/export").content
    manifest, lines = read_export(body)
    assert [(w["stage"], w["package"]) for w in manifest["invoice"]["gray_release"]] == [
        (1, "verified-gray-pkg"),
        (2, "verified-gray-pkg"),
    ]
    assert len(lines) == 37  # every record, the gray ones included

    report = verify_export(manifest, lines, pinned_keys(agent))
    verdicts = {v.check: v for v in report.verdicts}
    assert report.ok, [(v.check, v.detail) for v in report.verdicts if not v.ok]
    assert verdicts["gray release"].detail == "32 records of 2 stages with billing off, not billed"
    assert verdicts["line usage requests"].ok

    del manifest["invoice"]["gray_release"]  # a window left out: the gray records look billable
    tampered = {v.check: v for v in verify_export(manifest, lines, pinned_keys(agent)).verdicts}
    assert not tampered["line usage requests"].ok
    assert "quantity 5.000000 but the records give 37" in str(tampered["line usage requests"].detail)
