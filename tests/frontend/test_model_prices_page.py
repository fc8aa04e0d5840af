"""The portal's model prices page (the LLM price catalogue per 1M tokens): the versions in force on a day,
a model's history, bad query values named on the page, zh-Hans; and the contract page's catalogue line."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import Role
from catalog.models import ModelPrice
from frontend.views.catalog import per_million
from frontend.views.usage import charts_available
from tests.factories import ContractFactory, TenantFactory
from tests.frontend.support import member

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
URL = reverse("portal-model-prices")


def price(model_id: str, day: date, input: str, output: str, currency: str = "CNY", **more: str) -> None:
    ModelPrice.objects.create(
        model_id=model_id,
        currency=currency,
        effective_from=day,
        input_per_token=Decimal(input),
        output_per_token=Decimal(output),
        cache_read_per_token=Decimal(more["read"]) if "read" in more else None,
        cache_write_per_token=Decimal(more["write"]) if "write" in more else None,
        provider=more.get("provider", "openai"),
        mode=more.get("mode", "chat"),
    )


@pytest.fixture
def catalogue() -> None:
    price("gpt-x", date(2026, 12, 1), "0.0000025", "0.00001")
    price("gpt-x", date(2026, 12, 15), "0.000002", "0.000008", read="0.0000005", write="0.000003125")
    price("mixtral-8x7b", date(2026, 12, 15), "0.0000007", "0.0000007", provider="mistral")
    price("gpt-x", date(2026, 12, 1), "0.000003", "0.000012", currency="USD")


def reader(currency: str = "CNY", language: str = "en") -> Client:
    tenant = TenantFactory.create()
    ContractFactory.create(tenant=tenant, currency=currency)
    return member(tenant, Role.READ_ONLY, language=language)


def row(html: str, model_id: str) -> str:
    start = html.index(f'data-testid="model-price-{model_id}"')
    return html[start : html.index("</tr>", start)]


def test_per_million_is_exact_without_trailing_zeros() -> None:
    assert per_million(Decimal("0.000002500000000")) == Decimal("2.5")
    assert str(per_million(Decimal("0.000010000000000"))) == "10"
    assert str(per_million(Decimal("0.000000000000001"))) == "1E-9"  # shown as 0.000000001
    assert per_million(Decimal("0.000003125")) == Decimal("3.125")


@pytest.mark.usefixtures("catalogue")
def test_the_versions_in_force_on_a_day_per_1m_tokens() -> None:
    client = reader()
    on_14th = client.get(URL, {"as_of": "2026-12-14"})
    assert on_14th.status_code == 200
    html = on_14th.content.decode()
    assert 'data-testid="nav-model-prices" aria-current="page"' in html
    assert 'data-testid="model-price-mixtral-8x7b"' not in html  # its first version is from the 15th
    old = row(html, "gpt-x")
    assert ">2026-12-01<" in old and ">2.5<" in old and ">10<" in old
    assert old.count("= input") == 2  # no cache prices stated: the input price, with a note
    assert '<td class="num">2.5 <small class="muted">= input</small></td>' in old
    assert "/v1/catalog/model-prices/export?currency=CNY&amp;as_of=2026-12-14" in html

    html = client.get(URL, {"as_of": "2026-12-15"}).content.decode()
    new = row(html, "gpt-x")
    assert ">2026-12-15<" in new and ">2<" in new and ">8<" in new and ">0.5<" in new and ">3.125<" in new
    assert "= input" not in new
    assert ">0.7<" in row(html, "mixtral-8x7b") and ">mistral<" in row(html, "mixtral-8x7b")


@pytest.mark.usefixtures("catalogue")
def test_the_currency_defaults_to_the_first_contracts_and_today() -> None:
    html = reader("USD").get(URL).content.decode()
    assert '<option value="USD" selected>' in html
    assert ">3<" in row(html, "gpt-x") and ">12<" in row(html, "gpt-x")  # today, in USD
    html = member(TenantFactory.create()).get(URL).content.decode()  # no contract: CNY
    assert '<option value="CNY" selected>' in html


@pytest.mark.usefixtures("catalogue")
def test_a_models_history_lists_every_version_of_it_in_that_currency() -> None:
    client = reader()
    link = client.get(URL, {"as_of": "2026-12-14"}).content.decode()
    assert 'href="?currency=CNY&amp;as_of=2026-12-14&amp;model=gpt-x"' in link
    html = client.get(URL, {"as_of": "2026-12-14", "model": "gpt-x"}).content.decode()
    assert 'data-testid="model-history"' in html and "Price history of gpt-x" in html
    first = html[html.index('data-testid="model-version-2026-12-01"') :]
    first = first[: first.index("</tr>")]
    assert ">2026-12-14<" in first and 'data-testid="model-version-in-force"' in first  # until the 15th
    second = html[html.index('data-testid="model-version-2026-12-15"') :]
    second = second[: second.index("</tr>")]
    assert ">3.125<" in second and "model-version-in-force" not in second and ">—<" in second
    assert html.count('data-testid="model-version-20') == 2  # the USD version is not in the CNY history
    if charts_available():
        assert 'id="model-history-data"' in html and "frontend/model_prices.js" in html
        assert '[1796083200000, "2.5", true]' in html  # 2026-12-01 00:00 UTC, exact price
    else:
        assert "model_prices.js" not in html


@pytest.mark.usefixtures("catalogue")
def test_a_currency_with_no_prices_says_so() -> None:
    client = reader()
    html = client.get(URL, {"currency": "EUR"}).content.decode()
    assert 'data-testid="model-prices-empty">The catalogue has no prices in EUR.<' in html
    html = client.get(URL, {"currency": "CNY", "as_of": "2026-11-30"}).content.decode()
    assert "No model has a price in CNY in force on 2026-11-30" in html


@pytest.mark.usefixtures("catalogue")
@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"as_of": "2026-13-45"}, "“2026-13-45” is not a day (YYYY-MM-DD)"),
        ({"as_of": "20261215"}, "“20261215” is not a day (YYYY-MM-DD)"),
        ({"as_of": "<b>x</b>"}, "“&lt;b&gt;x&lt;/b&gt;” is not a day"),
        ({"currency": "XYZ"}, "“XYZ” is not a currency the catalogue prices in; showing CNY."),
        ({"currency": "x" * 500}, "“" + "x" * 64 + "…” is not a currency"),
        ({"model": "no-such-model"}, "no prices for the model “no-such-model” in CNY."),
    ],
)
def test_bad_query_values_are_named_on_the_page(query: dict[str, str], message: str) -> None:
    answer = reader().get(URL, query)
    assert answer.status_code == 200
    html = answer.content.decode()
    assert 'data-testid="model-prices-problems"' in html and message in html
    assert 'data-testid="model-prices-table"' in html


@pytest.mark.usefixtures("catalogue")
def test_the_page_renders_in_chinese() -> None:
    client = reader(language="zh-hans")
    html = client.get(URL, {"as_of": "2026-12-14", "model": "gpt-x"}).content.decode()
    assert ">模型价格<" in html and "= 输入价" in html and "gpt-x 的价格历史" in html
    assert "下载为 LiteLLM JSON" in html
    html = client.get(URL, {"as_of": "bad"}).content.decode()
    assert "“bad”不是日期（YYYY-MM-DD）" in html


@pytest.mark.usefixtures("catalogue")
def test_the_export_link_downloads_litellms_file_with_the_session() -> None:
    answer = reader().get("/v1/catalog/model-prices/export", {"currency": "CNY", "as_of": "2026-12-14"})
    assert answer.status_code == 200
    assert b'"gpt-x"' in answer.content and b"mixtral" not in answer.content


def test_a_catalogue_priced_contract_says_so_with_its_adjustment() -> None:
    cases = [
        (Decimal("0.1"), "+10 %"),
        (Decimal("-0.15"), "\u221215 %"),
        (Decimal("0.125"), "+12.5 %"),
        (Decimal(0), "at list price"),
    ]
    for adjustment, shown in cases:
        contract = ContractFactory.create(
            currency="USD", price_by_catalogue=True, catalogue_adjustment=adjustment
        )
        html = member(contract.tenant).get(reverse("portal-contract", args=[contract.code])).content.decode()
        assert "Tokens are priced by the model price catalogue" in html
        assert f'data-testid="contract-catalogue-adjustment">{shown}<' in html
        assert f'href="{URL}?currency=USD"' in html
    contract = ContractFactory.create(price_by_catalogue=True, catalogue_adjustment=Decimal("-0.15"))
    chinese = member(contract.tenant, language="zh-hans")
    html = chinese.get(reverse("portal-contract", args=[contract.code])).content.decode()
    assert "词元" not in html and "令牌按模型价格目录计价" in html

    other = ContractFactory.create()
    html = member(other.tenant).get(reverse("portal-contract", args=[other.code])).content.decode()
    assert 'data-testid="contract-catalogue"' not in html
    assert "model price catalogue" not in html
