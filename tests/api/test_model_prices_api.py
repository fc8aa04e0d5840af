"""The LLM price catalogue over HTTP and on the command line: import a LiteLLM file (staff), list the
versions, export them back as the same format."""

from __future__ import annotations

import json
from decimal import Decimal
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from catalog.models import ModelPrice
from tests.api.conftest import member_client, staff_client
from tests.billing.test_price_catalogue import SAMPLE
from tests.factories import ContractFactory, TenantFactory

pytestmark = pytest.mark.django_db
IMPORT = "/v1/catalog/model-prices/import"


def _import(client: Client, body: str, query: str = "currency=CNY&effective_from=2026-11-01") -> Any:
    return client.post(f"{IMPORT}?{query}", data=body, content_type="application/json")


def test_staff_import_the_users_file_and_a_retry_stores_nothing_twice() -> None:
    staff = staff_client()
    first = _import(staff, SAMPLE)
    assert first.status_code == 201, first.content
    assert first.json() == {
        "created": ["tiny-qwen3-moe", "mixtral-8x7b", "text-embedding-3-small"],
        "unchanged": [],
        "skipped": ["sample_spec", "dall-e-3"],
    }
    again = _import(staff, SAMPLE)
    assert again.status_code == 200
    assert again.json()["created"] == [] and len(again.json()["unchanged"]) == 3
    assert ModelPrice.objects.count() == 3
    stored = ModelPrice.objects.get(model_id="tiny-qwen3-moe")
    assert stored.cache_write_per_token == Decimal("0.0000025")  # exact, never through a float


def test_a_malformed_entry_answers_400_naming_model_and_field_and_stores_nothing() -> None:
    bad = SAMPLE.replace('"output_cost_per_token": 6e-07', '"output_cost_per_token": "6e-07"')
    answer = _import(staff_client(), bad)
    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == "invalid_model_prices"
    assert body["details"]["refusals"] == [
        {
            "model": "mixtral-8x7b",
            "field": "output_cost_per_token",
            "message": "mixtral-8x7b: output_cost_per_token must be a JSON number",
        }
    ]
    assert ModelPrice.objects.count() == 0


@pytest.mark.parametrize(
    ("query", "body", "code"),
    [
        ("currency=XXX&effective_from=2026-11-01", SAMPLE, "invalid_currency"),
        ("currency=CNY&effective_from=2026-13-01", SAMPLE, "invalid_effective_from"),
        ("currency=CNY", SAMPLE, "invalid_effective_from"),
        ("currency=CNY&effective_from=2026-11-01", "{", "invalid_model_prices"),
        ("currency=CNY&effective_from=2026-11-01", '[{"a": 1}]', "invalid_model_prices"),
        ("currency=CNY&effective_from=2026-11-01", "[" * 5000 + "]" * 5000, "invalid_model_prices"),
    ],
)
def test_bad_requests_answer_400_with_a_code(query: str, body: str, code: str) -> None:
    answer = _import(staff_client(), body, query)
    assert (answer.status_code, answer.json()["code"]) == (400, code)


def test_other_prices_on_a_stored_day_answer_409_and_customers_cannot_import() -> None:
    staff = staff_client()
    assert _import(staff, SAMPLE).status_code == 201
    changed = _import(staff, SAMPLE.replace("8e-06", "9e-06"))
    assert (changed.status_code, changed.json()["code"]) == (409, "price_version_exists")
    assert changed.json()["details"]["models"] == ["tiny-qwen3-moe"]
    owner = member_client(TenantFactory.create())
    assert _import(owner, SAMPLE, "currency=CNY&effective_from=2026-12-01").status_code == 403


def test_customers_list_the_versions_in_force_and_export_them_as_the_same_file() -> None:
    staff = staff_client()
    _import(staff, SAMPLE)
    _import(staff, SAMPLE.replace("8e-06", "6e-06"), "currency=CNY&effective_from=2026-11-15")
    _import(staff, SAMPLE, "currency=USD&effective_from=2026-11-01")
    customer = member_client(TenantFactory.create(), "read_only")
    listed = customer.get("/v1/catalog/model-prices?model=tiny-qwen3-moe&currency=CNY")
    assert [(v["effective_from"], v["output_per_token"]) for v in listed.json()["results"]] == [
        ("2026-11-01", "0.000008000000000"),
        ("2026-11-15", "0.000006000000000"),
    ]
    on_14th = customer.get("/v1/catalog/model-prices?model=tiny-qwen3-moe&currency=CNY&as_of=2026-11-14")
    assert [v["effective_from"] for v in on_14th.json()["results"]] == ["2026-11-01"]
    exported = customer.get("/v1/catalog/model-prices/export?currency=CNY&as_of=2026-11-20")
    assert exported.status_code == 200 and exported["Content-Type"] == "application/json"
    data = json.loads(exported.content)
    assert sorted(data) == ["mixtral-8x7b", "text-embedding-3-small", "tiny-qwen3-moe"]
    assert data["tiny-qwen3-moe"] == {
        "input_cost_per_token": 2e-06,
        "output_cost_per_token": 6e-06,
        "cache_read_input_token_cost": 5e-07,
        "cache_creation_input_token_cost": 2.5e-06,
        "litellm_provider": "treemeter",
        "mode": "chat",
    }
    for bad in ("as_of=yesterday", "as_of="):
        assert customer.get(f"/v1/catalog/model-prices?{bad}").json()["code"] == "invalid_as_of"
    assert customer.get("/v1/catalog/model-prices/export").json()["code"] == "invalid_currency"


def test_the_commands_import_and_export_a_file(tmp_path: Path) -> None:
    source = tmp_path / "model_prices_and_context_window.json"
    source.write_text(SAMPLE)
    out = StringIO()
    call_command(
        "import_model_prices", source, "--currency", "CNY", "--effective-from", "2026-11-01", stdout=out
    )
    assert out.getvalue().strip() == "3 stored, 0 already there, 2 skipped (no token price)"
    target = tmp_path / "exported.json"
    call_command("export_model_prices", "--currency", "CNY", "--as-of", "2026-11-01", "--output", target)
    assert json.loads(target.read_text())["mixtral-8x7b"]["input_cost_per_token"] == 6e-07
    source.write_text(SAMPLE.replace("2e-08", "-2e-08"))
    with pytest.raises(CommandError, match="text-embedding-3-small: input_cost_per_token must be"):
        call_command("import_model_prices", source, "--currency", "CNY", "--effective-from", "2026-11-02")


def test_a_file_over_the_limit_answers_413(settings: Any) -> None:
    settings.JSON_FILE_MAX_BYTES = 2048
    answer = _import(staff_client(), SAMPLE + " " * 2048)
    assert (answer.status_code, answer.json()["code"]) == (413, "request_too_large")
    assert ModelPrice.objects.count() == 0


@pytest.mark.usefixtures("clickhouse")  # the contract's quotas measure this period's usage
def test_staff_price_a_contract_by_catalogue_and_its_members_see_it() -> None:
    contract = ContractFactory.create()
    staff = staff_client()
    url = f"/v1/contracts/{contract.code}/terms"
    answer = staff.patch(
        url, {"price_by_catalogue": True, "catalogue_adjustment": "-0.15"}, "application/json"
    )
    assert answer.status_code == 200, answer.content
    assert (answer.json()["price_by_catalogue"], answer.json()["catalogue_adjustment"]) == (True, "-0.15")
    bad = staff.patch(url, {"catalogue_adjustment": "-2"}, "application/json")
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_term")
    priced = staff.put(
        f"/v1/contracts/{contract.code}/charges/tokens_out", {"unit_price": "0.001"}, "application/json"
    )
    assert (priced.status_code, priced.json()["code"]) == (400, "catalogue_dimension_priced")
    seen = member_client(contract.tenant, "read_only").get(f"/v1/contracts/{contract.code}").json()
    assert (seen["price_by_catalogue"], seen["catalogue_adjustment"]) == (True, "-0.1500")
