"""The verifier re-rates the lines of a contract priced by the LLM price catalogue from the records and
the export's pinned catalogue versions, with its own code: a real export of a finalised invoice, then
tampered lines and pins, each named with the line and by how much it differs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any

import pytest
from django.test import Client

from billing.services import finalize_invoice
from catalog.litellm import load_prices
from catalog.services import import_model_prices
from contracts.models import ContractPrice
from contracts.services import update_terms
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.billing.test_price_catalogue import SAMPLE
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ledger.support import member_client, november_invoice, pinned_keys, send
from treemeter_verify import verify_export
from treemeter_verify.check import read_export

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
CHECK = "catalogue lines"


def _ns(day: int, hour: int = 0) -> int:
    return int(datetime(2026, 11, day, hour, tzinfo=UTC).timestamp()) * 10**9


def _export(client: Client) -> tuple[dict[str, Any], Sequence[bytes], SigningAgent]:
    import_model_prices(load_prices(SAMPLE), "CNY", date(2026, 11, 1))
    import_model_prices(load_prices(SAMPLE.replace("8e-06", "6e-06")), "CNY", date(2026, 11, 15))
    contract = ContractFactory.create()
    update_terms(contract, {"price_by_catalogue": True, "catalogue_adjustment": "0.1"})
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price="0.01")
    agent = signing_agent(contract)
    fields = {"tokens_in": 400_000, "tokens_out": 100_000, "prefix_cache_hit_tokens": 100_000}
    records = [
        agent.record(contract, start_ns=_ns(3), prefix_cache_write_tokens=50_000, **fields),
        agent.record(contract, start_ns=_ns(14, 23), **fields),  # the last hour of the first version
        agent.record(contract, start_ns=_ns(15), **fields),  # the second version's first instant
        agent.record(contract, start_ns=_ns(16), model_id="mixtral-8x7b", **fields),
        agent.record(contract, start_ns=_ns(17), status="error", **fields),  # not billed
    ]
    send(client, agent, records)
    invoice = finalize_invoice(november_invoice(contract))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    body = member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice.pk}/export").content
    manifest, lines = read_export(body)
    return manifest, lines, agent


def _verdict(manifest: dict[str, Any], lines: Sequence[bytes], agent: SigningAgent) -> tuple[bool, str]:
    report = verify_export(manifest, lines, pinned_keys(agent))
    [verdict] = [v for v in report.verdicts if v.check == CHECK]
    return verdict.ok, verdict.detail


def test_catalogue_lines_are_re_rated_from_the_records_and_the_pinned_versions(client: Client) -> None:
    manifest, lines, agent = _export(client)
    invoice = manifest["invoice"]
    assert invoice["catalogue"]["adjustment"] == "0.1"
    # tiny, version of 1 Nov (records of 3 and 14 Nov): in 250,000 + 300,000 = 550,000 × 0.0000022 =
    # 1.21; out 200,000 × 0.0000088 = 1.76; reads 200,000 × 0.00000055 = 0.11; writes 50,000 ×
    # 0.00000275 = 0.1375 → 0.14. Version of 15 Nov: in 300,000 → 0.66, out 100,000 × 0.0000066 = 0.66,
    # reads 0.055 → 0.06. mixtral (6e-07 every kind, cache prices not stated): in 300,000 × 0.00000066
    # = 0.198 → 0.20, out 0.066 → 0.07, reads 0.066 → 0.07.
    assert [
        (
            x["dimension"],
            x["catalogue"]["model_id"],
            x["catalogue"]["effective_from"],
            x["quantity"],
            x["amount"],
        )
        for x in invoice["lines"]
        if "catalogue" in x
    ] == [
        ("tokens_in", "mixtral-8x7b", "2026-11-15", "0.300000", "0.20"),
        ("tokens_out", "mixtral-8x7b", "2026-11-15", "0.100000", "0.07"),
        ("cached_tokens", "mixtral-8x7b", "2026-11-15", "0.100000", "0.07"),
        ("tokens_in", "tiny-qwen3-moe", "2026-11-01", "0.550000", "1.21"),
        ("tokens_out", "tiny-qwen3-moe", "2026-11-01", "0.200000", "1.76"),
        ("cached_tokens", "tiny-qwen3-moe", "2026-11-01", "0.200000", "0.11"),
        ("cache_write_tokens", "tiny-qwen3-moe", "2026-11-01", "0.050000", "0.14"),
        ("tokens_in", "tiny-qwen3-moe", "2026-11-15", "0.300000", "0.66"),
        ("tokens_out", "tiny-qwen3-moe", "2026-11-15", "0.100000", "0.66"),
        ("cached_tokens", "tiny-qwen3-moe", "2026-11-15", "0.100000", "0.06"),
    ]
    assert _verdict(manifest, lines, agent) == (True, "10 lines over 3 catalogue versions = 4.94 CNY")
    report = verify_export(manifest, lines, pinned_keys(agent))
    assert report.ok, [v for v in report.verdicts if not v.ok]


def test_a_tampered_amount_quantity_or_pin_is_named(client: Client) -> None:
    manifest, lines, agent = _export(client)
    catalogue_lines = [x for x in manifest["invoice"]["lines"] if "catalogue" in x]

    catalogue_lines[4]["amount"] = "1.86"
    assert _verdict(manifest, lines, agent) == (
        False,
        "tiny-qwen3-moe tokens_out (catalogue from 2026-11-01): amount 1.86 CNY but the pinned price gives "
        "1.76 (off by 0.10 CNY)",
    )
    catalogue_lines[4]["amount"] = "1.76"
    catalogue_lines[0]["quantity"] = "0.200000"
    ok, detail = _verdict(manifest, lines, agent)
    assert not ok and "mixtral-8x7b tokens_in (catalogue from 2026-11-15): quantity 0.200000" in detail
    catalogue_lines[0]["quantity"] = "0.300000"
    manifest["invoice"]["catalogue"]["prices"] = [
        p for p in manifest["invoice"]["catalogue"]["prices"] if p["model_id"] != "mixtral-8x7b"
    ]
    ok, detail = _verdict(manifest, lines, agent)
    assert not ok and "records of model mixtral-8x7b on 2026-11-16 have no pinned catalogue price" in detail


def test_an_invoice_not_priced_by_catalogue_skips_the_check(client: Client) -> None:
    contract = ContractFactory.create()
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price="0.01")
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract, start_ns=_ns(3))])
    invoice = finalize_invoice(november_invoice(contract))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    manifest, lines = read_export(
        member_client(contract, "bob").get(f"/v1/ledger/invoices/{invoice.pk}/export").content
    )
    [verdict] = [v for v in verify_export(manifest, lines, pinned_keys(agent)).verdicts if v.check == CHECK]
    assert verdict.skipped and manifest["invoice"]["catalogue"] is None
