"""The verifier re-rates late-usage adjustment lines (issue 21.8) from the adjusted invoice's pinned
terms, with its own code: real records through ingest, a finalised November, late records, a finalised
December and its export; then tampered amounts, quantities and pins, each named with the line and by how
much it differs. Amounts computed by hand in comments."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.models import Invoice
from billing.services import generate_invoice
from catalog.litellm import load_prices
from catalog.services import import_model_prices
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from contracts.services import update_terms
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.billing.test_price_catalogue import SAMPLE
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ledger.support import member_client, pinned_keys, send
from treemeter_verify import verify_export
from treemeter_verify.check import read_export

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
NOV, DEC = month_bounds("2026-11"), month_bounds("2026-12")
DEC_2, JAN_2 = datetime(2026, 12, 2, tzinfo=UTC), datetime(2027, 1, 2, tzinfo=UTC)
CHANGE = datetime(2026, 11, 15, tzinfo=UTC)


def _ns(month: int, day: int) -> int:
    return int(datetime(2026, month, day, tzinfo=UTC).timestamp()) * 10**9


def _records(
    agent: SigningAgent, contract: Contract, count: int, month: int, day: int, **fields: Any
) -> list:
    return [agent.record(contract, start_ns=_ns(month, day), **fields) for _ in range(count)]


def _december_export(client: Client, contract: Contract, agent: SigningAgent, late: list) -> tuple:
    """November finalised, then the late records and one December record, December finalised and
    exported."""
    november = generate_invoice(contract.pk, *NOV, now=DEC_2)
    assert november.status == Invoice.Status.FINALIZED
    send(client, agent, [*late, *_records(agent, contract, 1, 12, 5)])
    december = generate_invoice(contract.pk, *DEC, now=JAN_2)
    assert december.status == Invoice.Status.FINALIZED
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    body = member_client(contract, "alice").get(f"/v1/ledger/invoices/{december.pk}/export").content
    manifest, lines = read_export(body)
    return manifest, lines, november.number


def _verdicts(manifest: dict[str, Any], lines: list[bytes], agent: SigningAgent) -> dict[str, Any]:
    return {v.check: v for v in verify_export(manifest, lines, pinned_keys(agent)).verdicts}


def _adjustment(manifest: dict[str, Any], dimension: str) -> dict[str, Any]:
    [line] = [
        x for x in manifest["invoice"]["lines"] if (x["kind"], x["dimension"]) == ("adjustment", dimension)
    ]
    return line


def _price_change_export(client: Client) -> tuple[dict[str, Any], list[bytes], SigningAgent, str]:
    contract = ContractFactory.create()
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("0.01"))
    ContractPrice.objects.create(contract=contract, dimension="tokens_out", unit_price=D("0.00003"))
    ContractPrice.objects.create(
        contract=contract, dimension="tokens_out", unit_price=D("0.00002"), effective_from=CHANGE
    )
    agent = signing_agent(contract)
    send(client, agent, _records(agent, contract, 10, 11, 3, tokens_out=100_000))
    send(client, agent, _records(agent, contract, 10, 11, 20, tokens_out=100_000))
    late = [  # before the change: 200,000 at 0.00003; after it: 300,000 at 0.00002
        *_records(agent, contract, 2, 11, 3, tokens_out=100_000),
        *_records(agent, contract, 3, 11, 20, tokens_out=100_000),
    ]
    manifest, lines, number = _december_export(client, contract, agent, late)
    return manifest, lines, agent, number


def test_adjustment_lines_are_re_rated_from_the_adjusted_invoices_pinned_terms(client: Client) -> None:
    manifest, lines, agent, number = _price_change_export(client)
    # 5 late requests × 0.01 = 0.05; tokens: 200,000 × 0.00003 + 300,000 × 0.00002 = 6.00 + 6.00 = 12.00.
    tokens = _adjustment(manifest, "tokens_out")
    assert (tokens["quantity"], tokens["amount"]) == ("500000.000000", "12.00")
    assert tokens["late_usage"]["rerated"] == {
        "segmented": True,
        "versions": ["", CHANGE.isoformat()],
        "before": ["1000000", "1000000"],
        "after": ["1200000", "1300000"],
        "value": "0",
    }
    assert list(manifest["earlier_terms"]) == [number]
    verdicts = _verdicts(manifest, lines, agent)
    assert all(v.ok for v in verdicts.values())
    requests, tokens_out = verdicts["line adjustment requests"], verdicts["line adjustment tokens_out"]
    assert not requests.skipped and requests.detail.startswith(
        f"5 late in 2026-11 ({number}): 20 → 25 under its pinned terms = 0.05 CNY; the quantities before"
    )
    assert tokens_out.detail.startswith(
        f"500000 late in 2026-11 ({number}): 2000000 → 2500000 under its pinned terms = 12.00 CNY"
    )


def test_a_tampered_adjustment_is_named_with_its_difference(client: Client) -> None:
    manifest, lines, agent, number = _price_change_export(client)
    line = _adjustment(manifest, "tokens_out")
    line["amount"] = "12.10"
    verdict = _verdicts(manifest, lines, agent)["line adjustment tokens_out"]
    assert not verdict.ok
    assert verdict.detail == f"amount 12.10 CNY but invoice {number}'s terms give 12.00 (off by 0.10 CNY)"

    line["amount"] = "12.00"
    line["late_usage"]["rerated"]["after"][0] = "1300000"  # claims 100,000 more at the old price
    verdict = _verdicts(manifest, lines, agent)["line adjustment tokens_out"]
    assert verdict.detail == (
        "quantity 500000 but before and after differ by 600000; "
        f"amount 12.00 CNY but invoice {number}'s terms give 15.00 (off by -3.00 CNY)"
    )

    line["late_usage"]["rerated"]["after"][0] = "1200000"
    manifest["earlier_terms"][number]["prices"]["tokens_out"]["versions"][0]["properties"]["unit_price"] = (
        "0.00004"
    )
    verdict = _verdicts(manifest, lines, agent)["line adjustment tokens_out"]
    assert verdict.detail == f"amount 12.00 CNY but invoice {number}'s terms give 14.00 (off by -2.00 CNY)"

    del manifest["earlier_terms"][number]
    verdict = _verdicts(manifest, lines, agent)["line adjustment tokens_out"]
    assert verdict.detail == f"the export pins no terms of invoice {number}"


def test_late_usage_that_takes_the_allowance_is_re_rated_in_time_order(client: Client) -> None:
    contract = ContractFactory.create()
    ContractPrice.objects.create(
        contract=contract, dimension="tokens_out", unit_price=D("0.00003"), included_quantity=D(500_000)
    )
    ContractPrice.objects.create(
        contract=contract,
        dimension="tokens_out",
        unit_price=D("0.00002"),
        included_quantity=D(1_500_000),
        effective_from=CHANGE,
    )
    agent = signing_agent(contract)
    send(client, agent, _records(agent, contract, 10, 11, 3, tokens_out=100_000))
    send(client, agent, _records(agent, contract, 10, 11, 20, tokens_out=100_000))
    late = _records(agent, contract, 2, 11, 3, tokens_out=100_000)
    manifest, lines, _ = _december_export(client, contract, agent, late)
    # Billed 500,000 × 0.00002 = 10.00; now 700,000 × 0.00002 = 14.00: the 200,000 late tokens cost 4.00.
    assert _adjustment(manifest, "tokens_out")["amount"] == "4.00"
    verdict = _verdicts(manifest, lines, agent)["line adjustment tokens_out"]
    assert verdict.ok and "200000 late in 2026-11" in verdict.detail


def test_late_catalogue_tokens_are_re_rated_at_the_adjusted_invoices_pinned_version(client: Client) -> None:
    import_model_prices(load_prices(SAMPLE), "CNY", date(2026, 11, 1))
    contract = ContractFactory.create()
    update_terms(contract, {"price_by_catalogue": True, "catalogue_adjustment": "0.1"})
    agent = signing_agent(contract)
    no_cache = {"prefix_cache_hit_tokens": 0, "tokens_out": 0}
    send(client, agent, _records(agent, contract, 1, 11, 3, tokens_in=1_000_000, **no_cache))
    late = _records(agent, contract, 1, 11, 3, tokens_in=500_000, **no_cache)
    manifest, lines, number = _december_export(client, contract, agent, late)
    # Billed 1,000,000 × 0.000002 × 1.1 = 2.20; now 1,500,000 → 3.30: the late line is 1.10.
    line = _adjustment(manifest, "tokens_in")
    assert (line["quantity"], line["amount"]) == ("0.500000", "1.10")
    assert line["late_usage"]["billed_before"] == {"tokens": "1000000", "amount": "2.20"}
    verdict = _verdicts(manifest, lines, agent)["line adjustment tokens_in"]
    assert verdict.ok and verdict.detail.startswith(
        f"500000 late tiny-qwen3-moe tokens in 2026-11 ({number}) at the 2026-11-01 price = 1.10 CNY"
    )

    line["late_usage"]["billed_before"]["amount"] = "2.00"
    verdict = _verdicts(manifest, lines, agent)["line adjustment tokens_in"]
    assert (
        verdict.detail == f"amount 1.10 CNY but invoice {number}'s pinned price gives 1.30 (off by -0.20 CNY)"
    )


def test_an_adjustment_without_its_statement_says_why_it_is_not_re_rated(client: Client) -> None:
    manifest, lines, agent, _ = _price_change_export(client)
    del _adjustment(manifest, "requests")["late_usage"]
    verdict = _verdicts(manifest, lines, agent)["line adjustment requests"]
    assert verdict.skipped and verdict.detail == (
        "an adjustment made before adjustments stated what they re-rate: not re-rated"
    )
