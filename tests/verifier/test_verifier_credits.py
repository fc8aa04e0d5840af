"""The verifier re-derives the invoice's credits and outcome fees (issue 21.8): SLA service-credit lines
from their stated ladder step and fee basis, the outcome line from its billed outcomes (checked against
the records of the export that declared them), and the prepaid credits and what is due; it names the
line that differs and by how much. Real finalised invoices, exported through /v1/ledger."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.outcomes import decide_outcome, declare_outcome
from billing.services import finalize_invoice, generate_invoice, grant_credits
from billing.settlement import issue_note
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice, ContractTax
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from sla.tasks import close_period_task
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ledger.support import member_client, november_invoice, pinned_keys, send
from tests.sla.helpers import make_policy
from treemeter_verify import verify_export
from treemeter_verify.check import read_export

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
AFTER_NOV = datetime(2026, 12, 2, tzinfo=UTC)


def _ns(month: int, day: int) -> int:
    return int(datetime(2026, month, day, tzinfo=UTC).timestamp()) * 10**9


def _export(contract: Contract, invoice_id: int) -> tuple[dict[str, Any], Sequence[bytes]]:
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    body = member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice_id}/export").content
    return read_export(body)


def _verdicts(manifest: dict[str, Any], lines: Sequence[bytes], agent: SigningAgent) -> dict[str, Any]:
    return {v.check: v for v in verify_export(manifest, lines, pinned_keys(agent)).verdicts}


def _verdict(
    manifest: dict[str, Any], lines: Sequence[bytes], agent: SigningAgent, check: str
) -> tuple[bool, str]:
    verdict = _verdicts(manifest, lines, agent)[check]
    return verdict.ok, verdict.detail


def _line(manifest: dict[str, Any], kind: str, dimension: str = "") -> dict[str, Any]:
    [line] = [x for x in manifest["invoice"]["lines"] if (x["kind"], x["dimension"]) == (kind, dimension)]
    return line


def test_an_sla_service_credit_line_is_re_derived_from_its_ladder_step_and_fee_basis(client: Client) -> None:
    # October: 96 of 100 requests served (availability 96 % < 99 %: the 25 % rung), 96 × 2.00 = 192.00
    # net; November: 50 × 2.00 = 100.00, less the credit 25 % × 192.00 = 48.00, 52.00 + 6 % tax.
    contract = ContractFactory.create(tax_rate=D("0.06"))
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("2.00"))
    make_policy(contract)
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract, start_ns=_ns(10, 10)) for _ in range(96)])
    send(client, agent, [agent.record(contract, start_ns=_ns(10, 11), status="error") for _ in range(4)])
    send(client, agent, [agent.record(contract, start_ns=_ns(11, 5)) for _ in range(50)])
    generate_invoice(contract.pk, *month_bounds("2026-10"), now=AFTER_NOV)
    assert close_period_task.apply(args=(contract.code, "2026-10")).get()["credit"] is not None
    invoice = finalize_invoice(november_invoice(contract))
    manifest, lines = _export(contract, invoice.pk)

    line = _line(manifest, "service_credit")
    assert (line["quantity"], line["amount"]) == ("1.000000", "-48.00")
    stated = line["service_credit"]
    assert {
        k: stated[k] for k in ("month", "objective", "measured_percent", "credit_percent", "fee_basis")
    } == {
        "month": "2026-10",
        "objective": "availability",
        "measured_percent": "96.0000",
        "credit_percent": "25.0000",
        "fee_basis": "192.00",
    }
    assert stated["ladder_step"] == {"below_percent": "99.0000", "credit_percent": "25.0000"}
    report = _verdicts(manifest, lines, agent)
    assert [v.check for v in report.values() if not v.ok] == []
    assert report["line service_credit"].detail == (
        f"25 % of 192.00 = -48.00 CNY for 2026-10 (SLA report #{stated['sla_report']}: availability "
        "96 % < 99 % → 25 %; measured attainment and fee basis stated by the platform: the SLA month is not "
        "in this export)"
    )
    assert not report["line service_credit"].skipped

    line["amount"] = "-47.50"
    ok, detail = _verdict(manifest, lines, agent, "line service_credit")
    assert (ok, detail) == (
        False,
        f"credit for 2026-10 (SLA report #{stated['sla_report']}): amount -47.50 CNY but 25 % of 192.00 "
        "gives -48.00 (off by 0.50 CNY)",
    )
    line["amount"] = "-48.00"
    stated["measured_percent"] = "99.5000"  # above the rung it claims
    ok, detail = _verdict(manifest, lines, agent, "line service_credit")
    assert not ok and detail.endswith("measured 99.5 % is not below the ladder step's 99 %")

    del line["service_credit"]  # an export made before the credits' details were exported
    verdict = _verdicts(manifest, lines, agent)["line service_credit"]
    assert verdict.skipped and verdict.detail == "an export without the credit's SLA details: not re-derived"


def test_an_outcome_line_is_re_derived_from_its_outcomes_and_the_records_that_declared_them(
    client: Client,
) -> None:
    # 15 % of the value above the first outcome (included): 3 outcomes worth 3,600, 2 billable, so
    # 2/3 of the value, 2,400 × 0.15 = 360.00. Two declared in November's records, one through the API.
    contract = ContractFactory.create(outcome_window_hours=1)
    ContractPrice.objects.create(
        contract=contract,
        dimension="outcomes",
        charge_model="percentage",
        properties={"rate": "0.15"},
        included_quantity=1,
    )
    agent = signing_agent(contract)
    declared = [
        agent.record(
            contract, start_ns=_ns(11, 7), outcome={"type": "match", "value": "2000.00", "ref": "r-1"}
        ),
        agent.record(contract, start_ns=_ns(11, 8), outcome={"type": "match", "value": "1000", "ref": "r-2"}),
        agent.record(contract, start_ns=_ns(11, 9)),
    ]
    send(client, agent, declared)
    api = declare_outcome(contract, "api-1", "match", D("600"), datetime(2026, 11, 3, tzinfo=UTC))
    decide_outcome(api, confirm=True, now=datetime(2026, 11, 3, 0, 30, tzinfo=UTC))
    invoice = finalize_invoice(november_invoice(contract))
    manifest, lines = _export(contract, invoice.pk)

    line = _line(manifest, "usage", "outcomes")
    assert (line["quantity"], line["amount"]) == ("3.000000", "360.00")
    assert sorted((o["ref"], o["type"], o["value"], o["record_id"]) for o in line["outcomes"]) == [
        ("api-1", "match", "600.000000", None),
        ("r-1", "match", "2000.000000", declared[0]["record_id"]),
        ("r-2", "match", "1000.000000", declared[1]["record_id"]),
    ]
    report = _verdicts(manifest, lines, agent)
    assert [v.check for v in report.values() if not v.ok] == []
    assert report["line usage outcomes"].detail == (
        "3 outcomes worth 3600 at percentage = 360.00 CNY (2 checked against their records, 1 declared "
        "through the API or in another period: stated by the platform)"
    )

    line["amount"] = "361.00"
    assert _verdict(manifest, lines, agent, "line usage outcomes") == (
        False,
        "amount 361.00 CNY but 3 outcomes worth 3600 give 360.00 under percentage (off by 1.00 CNY)",
    )
    line["amount"] = "360.00"
    [r2] = [o for o in line["outcomes"] if o["ref"] == "r-2"]
    # Worth more than its record declares: the amount follows (4,200 × 2/3 × 0.15), the record does not.
    r2["value"], line["amount"] = "1600.000000", "420.00"
    record_id = declared[1]["record_id"]
    assert _verdict(manifest, lines, agent, "line usage outcomes") == (
        False,
        f"outcome r-2: stated as r-2 match 1600 but its record {record_id} declares r-2 match 1000",
    )
    line["outcomes"].pop()
    ok, detail = _verdict(manifest, lines, agent, "line usage outcomes")
    assert not ok and "quantity 3 but 2 outcomes are billed" in detail

    del line["outcomes"]  # an export made before the billed outcomes were exported
    verdict = _verdicts(manifest, lines, agent)["line usage outcomes"]
    assert verdict.skipped and verdict.detail == "an export without the billed outcomes: not re-derived"


def test_prepaid_credits_pay_the_kinds_of_the_credit_order_and_what_is_due_follows(client: Client) -> None:
    # 10 requests × 0.50 = 5.00 and a base fee of 10.00, 6 % tax: 15.90. Credits may pay usage only:
    # 5.00 + its 0.30 tax = 5.30 of the 20.00 in the wallet; 10.60 due, 9.60 after a credit note of 1.00.
    contract = ContractFactory.create(tax_rate=D("0.06"), base_fee=D("10.00"), credit_order=["usage"])
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("0.50"))
    grant_credits(contract, D("20.00"), "top-up-1")
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract, start_ns=_ns(11, 20)) for _ in range(10)])
    invoice = finalize_invoice(november_invoice(contract))
    issue_note(invoice, "credit", D("1.00"), "goodwill")
    manifest, lines = _export(contract, invoice.pk)

    stated = manifest["invoice"]
    assert (stated["total"], stated["credits_applied"], stated["credit_notes"], stated["amount_due"]) == (
        "15.90",
        "5.30",
        "1.00",
        "9.60",
    )
    assert (stated["credit_allocation"], stated["terms"]["credit_order"]) == ({"usage": "5.30"}, ["usage"])
    report = _verdicts(manifest, lines, agent)
    assert [v.check for v in report.values() if not v.ok] == []
    assert report["prepaid credits"].detail == (
        "total 15.90 − credits 5.30 (paying usage) − credit notes 1.00 = due 9.60 CNY (the wallet's balance "
        "and the credit notes are stated by the platform)"
    )

    stated["credits_applied"], stated["amount_due"] = "6.00", "8.90"
    assert _verdict(manifest, lines, agent, "prepaid credits") == (
        False,
        "credits applied 6.00 CNY but the line kinds they may pay (usage) come to 5.30",
    )
    stated["credits_applied"], stated["amount_due"] = "5.30", "9.00"
    assert _verdict(manifest, lines, agent, "prepaid credits") == (
        False,
        "amount due 9.00 CNY but total 15.90 less credits 5.30 and credit notes 1.00 give 9.60 "
        "(off by -0.60 CNY)",
    )
    stated["amount_due"], stated["credit_allocation"] = "9.60", {"base_fee": "5.30"}
    assert _verdict(manifest, lines, agent, "prepaid credits") == (
        False,
        "allocation base_fee 5.30 but the credit order gives usage 5.30",
    )

    for key in ("credits_applied", "credit_allocation", "credit_notes", "amount_due"):
        del stated[key]  # an export made before the credits were exported
    verdict = _verdicts(manifest, lines, agent)["prepaid credits"]
    assert verdict.skipped and verdict.detail == "an export without its prepaid credits: not re-derived"


def test_credits_over_lines_taxed_per_line_count_each_lines_own_taxes(client: Client) -> None:
    # VAT 6 % on every line, a 10 % service tax on the base fee: the base fee comes to 10.00 + 0.60 +
    # 1.00 = 11.60, usage (10 × 0.50) to 5.00 + 0.30 = 5.30. The order pays the base fee first: of
    # 12.00 in the wallet, 11.60 there and 0.40 on usage; 16.90 − 12.00 = 4.90 due.
    contract = ContractFactory.create(base_fee=D("10.00"), credit_order=["base_fee", "usage"])
    ContractTax.objects.create(contract=contract, code="vat", name="VAT", rate=D("0.06"))
    ContractTax.objects.create(
        contract=contract, code="svc", name="Service tax", rate=D("0.10"), applies_to=["base_fee"]
    )
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("0.50"))
    grant_credits(contract, D("12.00"), "top-up-1")
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract, start_ns=_ns(11, 20)) for _ in range(10)])
    invoice = finalize_invoice(november_invoice(contract))
    manifest, lines = _export(contract, invoice.pk)

    stated = manifest["invoice"]
    assert (stated["total"], stated["credits_applied"], stated["amount_due"]) == ("16.90", "12.00", "4.90")
    assert stated["credit_allocation"] == {"base_fee": "11.60", "usage": "0.40"}
    assert _verdict(manifest, lines, agent, "prepaid credits") == (
        True,
        "total 16.90 − credits 12.00 (paying base_fee, usage) − credit notes 0.00 = due 4.90 CNY (the "
        "wallet's balance and the credit notes are stated by the platform)",
    )
    stated["credit_allocation"] = {"base_fee": "10.00", "usage": "2.00"}  # the base fee's taxes left out
    assert _verdict(manifest, lines, agent, "prepaid credits") == (
        False,
        "allocation base_fee 10.00, usage 2.00 but the credit order gives base_fee 11.60, usage 0.40",
    )


def test_without_a_credit_order_credits_pay_every_line_up_to_the_total(client: Client) -> None:
    contract = ContractFactory.create()
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("0.50"))
    grant_credits(contract, D("3.00"), "top-up-1")
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract, start_ns=_ns(11, 20)) for _ in range(10)])
    invoice = finalize_invoice(november_invoice(contract))
    manifest, lines = _export(contract, invoice.pk)

    stated = manifest["invoice"]
    assert (stated["credits_applied"], stated["credit_allocation"], stated["amount_due"]) == (
        "3.00",
        {"all": "3.00"},
        "2.00",
    )
    assert _verdict(manifest, lines, agent, "prepaid credits") == (
        True,
        "total 5.00 − credits 3.00 (paying every line) − credit notes 0.00 = due 2.00 CNY (the wallet's "
        "balance and the credit notes are stated by the platform)",
    )
    stated["credits_applied"], stated["credit_allocation"], stated["amount_due"] = (
        "5.50",
        {"all": "5.50"},
        "0.00",
    )
    assert _verdict(manifest, lines, agent, "prepaid credits") == (
        False,
        "credits applied 5.50 CNY exceed the total 5.00",
    )
