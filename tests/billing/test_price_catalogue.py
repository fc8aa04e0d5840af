"""The LLM price catalogue: per-model token prices, versioned by day, imported from and exported to
LiteLLM's `model_prices_and_context_window.json`, and contracts priced "by catalogue" with a markup or
a discount. Real records through ingest, real ClickHouse and PostgreSQL; every amount is computed by
hand in the comments."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models import Invoice, LateUsage
from billing.services import generate_invoice
from billing.tasks import run_invoices
from catalog.litellm import load_prices, render_prices
from catalog.models import ModelPrice
from catalog.services import import_model_prices
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from contracts.services import set_charge, update_terms
from pricing.errors import BillingError, InvalidRequest, TermsError
from tests.billing.usage import at, send
from tests.factories import ContractFactory

D = Decimal
NOV = month_bounds("2026-11")
DEC_2 = datetime(2026, 12, 2, tzinfo=UTC)

# A small sample in LiteLLM's format, as users keep it: a documentation entry, two chat models (one with
# cache prices, one without), an embedding model without an output price, and an image model.
SAMPLE = """{
    "sample_spec": {"max_tokens": "LEGACY parameter", "input_cost_per_token": 0.0, "mode": "chat"},
    "tiny-qwen3-moe": {
        "max_tokens": 8192, "input_cost_per_token": 2e-06, "output_cost_per_token": 8e-06,
        "cache_read_input_token_cost": 5e-07, "cache_creation_input_token_cost": 2.5e-06,
        "litellm_provider": "treemeter", "mode": "chat", "supports_function_calling": true
    },
    "mixtral-8x7b": {"input_cost_per_token": 6e-07, "output_cost_per_token": 6e-07, "mode": "chat"},
    "text-embedding-3-small": {"input_cost_per_token": 2e-08, "mode": "embedding"},
    "dall-e-3": {"input_cost_per_pixel": 4e-08, "mode": "image_generation"}
}"""


def test_the_sample_file_reads_as_exact_decimals() -> None:
    parsed = load_prices(SAMPLE)
    prices = {p.model_id: p for p in parsed.prices}
    assert sorted(prices) == ["mixtral-8x7b", "text-embedding-3-small", "tiny-qwen3-moe"]
    assert parsed.skipped == ["sample_spec", "dall-e-3"]
    tiny = prices["tiny-qwen3-moe"]
    assert (tiny.input_per_token, tiny.output_per_token) == (D("0.000002"), D("0.000008"))
    assert (tiny.cache_read_per_token, tiny.cache_write_per_token) == (D("0.0000005"), D("0.0000025"))
    assert (tiny.provider, tiny.mode) == ("treemeter", "chat")
    assert prices["mixtral-8x7b"].cache_read_per_token is None
    assert prices["text-embedding-3-small"].output_per_token == 0


@pytest.mark.parametrize(
    ("entry", "field", "message"),
    [
        (
            {"input_cost_per_token": "2e-06", "output_cost_per_token": 1e-06},
            "input_cost_per_token",
            "JSON number",
        ),
        (
            {"input_cost_per_token": -1e-06, "output_cost_per_token": 1e-06},
            "input_cost_per_token",
            "not negative",
        ),
        ({"input_cost_per_token": 1e-06}, "output_cost_per_token", "is missing"),
        ({"output_cost_per_token": 1e-06, "mode": "chat"}, "input_cost_per_token", "is missing"),
        (
            {
                "input_cost_per_token": 1e-06,
                "output_cost_per_token": 1e-06,
                "cache_read_input_token_cost": True,
            },
            "cache_read_input_token_cost",
            "JSON number",
        ),
        (
            {"input_cost_per_token": 1.23456789012345678e-06, "output_cost_per_token": 1e-06},
            "input_cost_per_token",
            "decimal places",
        ),
        ({"input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06, "mode": 3}, "mode", "string"),
        ("not an object", "entry", "object"),
        (
            {"input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06, "mode": "c" * 33},
            "mode",
            "at most 32",
        ),
        (
            {"input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06, "litellm_provider": "p" * 65},
            "litellm_provider",
            "at most 64",
        ),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_model_and_the_field(
    entry: object, field: str, message: str
) -> None:
    text = json.dumps(
        {"good-model": {"input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06}, "bad-model": entry}
    )
    with pytest.raises(InvalidRequest) as refused:
        load_prices(text)
    assert refused.value.code == "invalid_model_prices"
    [refusal] = refused.value.details["refusals"]
    assert (refusal["model"], refusal["field"]) == ("bad-model", field)
    assert message in refusal["message"] and refused.value.message.startswith(f"bad-model: {field}")


def test_a_model_id_longer_than_the_records_allow_is_refused() -> None:
    with pytest.raises(InvalidRequest) as refused:
        load_prices(json.dumps({"m" * 129: {"input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06}}))
    assert refused.value.details["refusals"][0]["field"] == "model"
    assert (
        len(
            load_prices(
                json.dumps({"m" * 128: {"input_cost_per_token": 0, "output_cost_per_token": 0}})
            ).prices
        )
        == 1
    )


def test_every_malformed_entry_is_listed_and_nan_or_non_json_is_refused() -> None:
    text = json.dumps(
        {"a": {"input_cost_per_token": "x"}, "b": {"input_cost_per_token": -1, "output_cost_per_token": 0}}
    )
    with pytest.raises(InvalidRequest) as refused:
        load_prices(text)
    assert [(r["model"], r["field"]) for r in refused.value.details["refusals"]] == [
        ("a", "output_cost_per_token"),
        ("a", "input_cost_per_token"),
        ("b", "input_cost_per_token"),
    ]
    assert "(and 2 more)" in refused.value.message
    for bad in ('{"m": {"input_cost_per_token": NaN, "output_cost_per_token": 1}}', "{", "[]"):
        with pytest.raises(InvalidRequest):
            load_prices(bad)


def test_export_reads_back_to_the_same_prices() -> None:
    parsed = load_prices(SAMPLE)
    again = load_prices(render_prices(parsed.prices))
    assert sorted(again.prices, key=str) == sorted(parsed.prices, key=str)
    exported = json.loads(render_prices(parsed.prices))
    assert exported["tiny-qwen3-moe"]["cache_creation_input_token_cost"] == 2.5e-06
    assert "cache_read_input_token_cost" not in exported["mixtral-8x7b"]


@pytest.mark.django_db
def test_an_import_is_all_or_nothing_and_a_retry_stores_nothing_twice() -> None:
    first = import_model_prices(load_prices(SAMPLE), "CNY", date(2026, 11, 1))
    assert sorted(first.created) == ["mixtral-8x7b", "text-embedding-3-small", "tiny-qwen3-moe"]
    again = import_model_prices(load_prices(SAMPLE), "CNY", date(2026, 11, 1))
    assert (again.created, sorted(again.unchanged)) == ([], sorted(first.created))
    assert ModelPrice.objects.count() == 3
    changed = SAMPLE.replace('6e-07, "output_cost_per_token": 6e-07', '7e-07, "output_cost_per_token": 6e-07')
    with pytest.raises(BillingError) as refused:
        import_model_prices(load_prices(changed), "CNY", date(2026, 11, 1))
    assert (refused.value.code, refused.value.details["models"]) == ("price_version_exists", ["mixtral-8x7b"])
    assert ModelPrice.objects.count() == 3  # nothing of the refused file was stored
    with pytest.raises(InvalidRequest):
        import_model_prices(load_prices(SAMPLE), "XXX", date(2026, 11, 1))


def _catalogue_contract(adjustment: str) -> Contract:
    contract = ContractFactory.create(currency="CNY")
    update_terms(contract, {"price_by_catalogue": True, "catalogue_adjustment": adjustment})
    return contract


def _lines(invoice: Invoice) -> list[tuple[str, str, Decimal, Decimal, Decimal]]:
    return [(x.dimension, x.description, x.quantity, x.unit_price, x.amount) for x in invoice.lines.all()]


@pytest.mark.django_db
@pytest.mark.usefixtures("clickhouse")
def test_each_record_is_priced_by_the_version_in_force_on_its_day_with_the_markup() -> None:
    import_model_prices(load_prices(SAMPLE), "CNY", date(2026, 11, 1))
    cheaper = SAMPLE.replace("8e-06", "6e-06")  # from 15 November, output costs 0.000006
    import_model_prices(load_prices(cheaper), "CNY", date(2026, 11, 15))
    contract = _catalogue_contract("0.1")  # 10 % markup
    set_charge(contract, "requests", unit_price="0.01")  # a dimension the catalogue does not price
    # 10 requests on 3 Nov: 1,000 tokens in each, 300 read from the prefix cache, 200 written to it.
    send(
        contract,
        10,
        at(2026, 11, 3),
        tokens_in=1000,
        tokens_out=500,
        prefix_cache_hit_tokens=300,
        prefix_cache_write_tokens=200,
    )
    # 4 requests on 14 Nov 23:00 (still the old version) and 6 on 15 Nov 00:00 (the new one).
    no_cache = {"prefix_cache_hit_tokens": 0}
    send(contract, 4, at(2026, 11, 14, 23), tokens_in=100, tokens_out=1000, **no_cache)
    send(contract, 6, at(2026, 11, 15), tokens_in=100, tokens_out=1000, **no_cache)
    send(contract, 2, at(2026, 11, 12), tokens_in=100, tokens_out=100, model_id="mixtral-8x7b", **no_cache)

    invoice = generate_invoice(contract.pk, *NOV, now=DEC_2)

    assert _lines(invoice) == [
        ("requests", "Requests", D(22), D("0.01"), D("0.22")),
        # mixtral 2 × 100 in at 6e-07 × 1.1: 200 × 0.00000066 = 0.000132 → 0.00; out the same.
        (
            "tokens_in",
            "mixtral-8x7b: Input tokens, not cached, per 1M tokens (catalogue from 2026-11-01)",
            D("0.0002"),
            D("0.66"),
            D("0.00"),
        ),
        (
            "tokens_out",
            "mixtral-8x7b: Output tokens, per 1M tokens (catalogue from 2026-11-01)",
            D("0.0002"),
            D("0.66"),
            D("0.00"),
        ),
        # Old version: in 10 × 500 + 4 × 100 = 5,400 × 0.0000022 = 0.01188 → 0.01;
        (
            "tokens_in",
            "tiny-qwen3-moe: Input tokens, not cached, per 1M tokens (catalogue from 2026-11-01)",
            D("0.0054"),
            D("2.2"),
            D("0.01"),
        ),
        # out 10 × 500 + 4 × 1,000 = 9,000 × 0.0000088 = 0.0792 → 0.08;
        (
            "tokens_out",
            "tiny-qwen3-moe: Output tokens, per 1M tokens (catalogue from 2026-11-01)",
            D("0.009"),
            D("8.8"),
            D("0.08"),
        ),
        # reads 3,000 × 0.00000055 = 0.00165 → 0.00; writes 2,000 × 0.00000275 = 0.0055 → 0.01.
        (
            "cached_tokens",
            "tiny-qwen3-moe: Prefix-cache reads, per 1M tokens (catalogue from 2026-11-01)",
            D("0.003"),
            D("0.55"),
            D("0.00"),
        ),
        (
            "cache_write_tokens",
            "tiny-qwen3-moe: Prefix-cache writes, per 1M tokens (catalogue from 2026-11-01)",
            D("0.002"),
            D("2.75"),
            D("0.01"),
        ),
        # New version: in 600 × 0.0000022 = 0.00132 → 0.00; out 6,000 × 0.0000066 = 0.0396 → 0.04.
        (
            "tokens_in",
            "tiny-qwen3-moe: Input tokens, not cached, per 1M tokens (catalogue from 2026-11-15)",
            D("0.0006"),
            D("2.2"),
            D("0.00"),
        ),
        (
            "tokens_out",
            "tiny-qwen3-moe: Output tokens, per 1M tokens (catalogue from 2026-11-15)",
            D("0.006"),
            D("6.6"),
            D("0.04"),
        ),
    ]
    assert invoice.total == D("0.36")
    pinned = invoice.terms["catalogue"]
    assert pinned["adjustment"] == "0.1"
    assert [(p["model_id"], p["effective_from"], p["output"]) for p in pinned["prices"]] == [
        ("mixtral-8x7b", "2026-11-01", "0.0000006"),
        ("tiny-qwen3-moe", "2026-11-01", "0.000008"),
        ("tiny-qwen3-moe", "2026-11-15", "0.000006"),
    ]
    assert pinned["prices"][0]["cache_read"] == "0.0000006"  # not stated: the input price
    writes = invoice.lines.get(dimension="cache_write_tokens")
    assert writes.details["catalogue"] == {
        "model_id": "tiny-qwen3-moe",
        "effective_from": "2026-11-01",
        "tokens": 2000,
        "list_price_per_token": "0.0000025",
        "adjustment": "0.1",
        "unit_price_per_million": "2.75",
    }


@pytest.mark.django_db
@pytest.mark.usefixtures("clickhouse")
def test_a_discount_and_large_volumes_round_once_per_line() -> None:
    import_model_prices(load_prices(SAMPLE), "CNY", date(2026, 11, 1))
    contract = _catalogue_contract("-0.15")  # 15 % discount
    send(
        contract, 3, at(2026, 11, 5), tokens_in=1_000_000, tokens_out=333_333, prefix_cache_hit_tokens=250_000
    )
    invoice = generate_invoice(contract.pk, *NOV, now=DEC_2)
    # in 3 × 750,000 = 2,250,000 × 0.000002 × 0.85 = 3.825 → 3.83 (half up);
    # out 999,999 × 0.000008 × 0.85 = 6.7999932 → 6.80; reads 750,000 × 0.0000005 × 0.85 = 0.31875 → 0.32.
    assert [(x.dimension, x.quantity, x.amount) for x in invoice.lines.all()] == [
        ("tokens_in", D("2.25"), D("3.83")),
        ("tokens_out", D("0.999999"), D("6.80")),
        ("cached_tokens", D("0.75"), D("0.32")),
    ]
    assert invoice.total == D("10.95")


@pytest.mark.django_db
@pytest.mark.usefixtures("clickhouse")
def test_usage_of_a_model_the_catalogue_does_not_price_is_refused_not_billed_at_zero() -> None:
    import_model_prices(load_prices(SAMPLE), "CNY", date(2026, 11, 10))
    contract = _catalogue_contract("0")
    send(contract, 1, at(2026, 11, 5), tokens_in=10, tokens_out=10)  # before the catalogue's first day
    with pytest.raises(TermsError) as refused:
        generate_invoice(contract.pk, *NOV, now=DEC_2)
    assert refused.value.code == "no_catalogue_price"
    assert refused.value.details == {"model_id": "tiny-qwen3-moe", "day": "2026-11-05"}
    assert not Invoice.objects.filter(contract=contract).exists()


@pytest.mark.django_db
def test_a_contract_priced_by_catalogue_has_no_token_price_of_its_own() -> None:
    contract = _catalogue_contract("0.05")
    with pytest.raises(TermsError) as refused:
        set_charge(contract, "tokens_out", unit_price="0.001")
    assert refused.value.code == "catalogue_dimension_priced"
    other = ContractFactory.create()
    ContractPrice.objects.create(contract=other, dimension="cache_write_tokens", unit_price=D("0.001"))
    with pytest.raises(TermsError) as refused:
        update_terms(other, {"price_by_catalogue": True})
    assert refused.value.details == {"dimensions": ["cache_write_tokens"]}
    for bad in ("-1.5", "10", "0.12345", "x"):
        with pytest.raises(TermsError):
            update_terms(other, {"catalogue_adjustment": bad})


@pytest.mark.django_db
@pytest.mark.usefixtures("clickhouse")
def test_late_tokens_are_billed_next_month_at_the_version_of_their_day() -> None:
    import_model_prices(load_prices(SAMPLE), "CNY", date(2026, 11, 1))
    contract = _catalogue_contract("0")
    no_cache = {"prefix_cache_hit_tokens": 0}
    send(contract, 1, at(2026, 11, 3), tokens_in=1_000_000, tokens_out=0, **no_cache)  # in: 2.00
    november = generate_invoice(contract.pk, *NOV, now=DEC_2)
    assert november.status == "finalized" and november.total == D("2.00")

    # Late: 500,000 more input tokens on 3 Nov (1.00), and a model November's invoice never saw.
    send(contract, 1, at(2026, 11, 3), tokens_in=500_000, tokens_out=0, **no_cache)
    send(contract, 1, at(2026, 11, 9), tokens_in=0, tokens_out=1_000_000, model_id="mixtral-8x7b", **no_cache)
    december = generate_invoice(contract.pk, *month_bounds("2026-12"), now=datetime(2027, 1, 2, tzinfo=UTC))

    late = [
        (x.dimension, x.description, x.quantity, x.amount) for x in december.lines.filter(kind="adjustment")
    ]
    assert late == [
        (
            "tokens_out",
            f"Late usage 2026-11 ({november.number}): mixtral-8x7b: Output tokens, per 1M tokens "
            "(catalogue from 2026-11-01)",
            D(1),
            D("0.60"),
        ),
        (
            "tokens_in",
            f"Late usage 2026-11 ({november.number}): tiny-qwen3-moe: Input tokens, not cached, "
            "per 1M tokens (catalogue from 2026-11-01)",
            D("0.5"),
            D("1.00"),
        ),
    ]
    assert december.total == D("1.60")
    reports = LateUsage.objects.filter(invoice=november).order_by("dimension")
    assert [(r.dimension, r.quantity, r.amount) for r in reports] == [
        ("tokens_in", D("0.5"), D("1.00")),
        ("tokens_out", D(1), D("0.60")),
    ]


@pytest.mark.django_db
@pytest.mark.usefixtures("clickhouse")
def test_the_invoice_run_bills_catalogue_contracts_in_its_batch_as_generate_invoice_does() -> None:
    """The run measures every catalogue contract's tokens per model and day in one query and reads the
    catalogue once per chunk: the same lines as generate_invoice."""
    import_model_prices(load_prices(SAMPLE), "CNY", date(2026, 11, 1))
    import_model_prices(load_prices(SAMPLE.replace("8e-06", "6e-06")), "CNY", date(2026, 11, 15))

    def catalogue_contracts(count: int) -> list[Contract]:
        made = []
        for k in range(count):
            contract = _catalogue_contract("0.1")
            set_charge(contract, "requests", unit_price="0.01")
            send(
                contract,
                k + 1,
                at(2026, 11, 3),
                tokens_in=1000,
                tokens_out=500,
                prefix_cache_write_tokens=100,
            )
            send(contract, 2, at(2026, 11, 20), tokens_in=10, tokens_out=5000, model_id="mixtral-8x7b")
            made.append(contract)
        return made

    alone = catalogue_contracts(1)[0]
    expected = _lines(generate_invoice(alone.pk, *NOV, now=DEC_2))
    batch = catalogue_contracts(3)
    with CaptureQueriesContext(connection) as captured:
        assert run_invoices("2026-11", now=DEC_2)["failed"] == {}
    assert _lines(Invoice.objects.get(contract=batch[0])) == expected
    # n requests on 3 Nov (tiny, version of 1 Nov): in 890n × 0.0000022, out 500n × 0.0000088, writes 100n
    # × 0.00000275; 2 on 20 Nov (mixtral, version of 15 Nov): out 10,000 × 0.00000066 = 0.01, no input
    # left after the 10 cached; requests (n + 2) × 0.01. n = 1: 0.03 + 0.01 = 0.04; n = 2: 0.04 + out
    # 0.0088 → 0.01 + 0.01 = 0.06; n = 3: 0.05 + in 0.005874 → 0.01 + out 0.0132 → 0.01 + 0.01 = 0.08.
    assert [i.total for i in Invoice.objects.filter(contract__in=batch).order_by("contract_id")] == [
        D("0.04"),
        D("0.06"),
        D("0.08"),
    ]
    reads = [q["sql"] for q in captured.captured_queries if "catalog_modelprice" in q["sql"]]
    assert len(reads) == 1  # one read of the catalogue for the chunk, not one per contract
