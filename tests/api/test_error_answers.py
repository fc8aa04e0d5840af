"""Every 4xx (405 included) under /v1/ answers {code, message, details}, whoever made it (config.middleware),
and control characters in a /v1/ path or query are refused with a code."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from django.test import Client
from django.urls import NoReverseMatch, URLPattern, URLResolver, converters, get_resolver, reverse

from tests.api.conftest import staff_client, token_client
from tests.factories import ContractFactory, TenantFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]

METHODS = ("get", "post", "put", "patch", "delete")


def api_routes() -> Iterator[tuple[str, dict[str, Any]]]:
    """(url name, kwargs) of every named /v1/ pattern, its parameters filled with values naming nothing."""

    def walk(patterns: list[Any], namespace: str = "") -> Iterator[tuple[str, list[Any]]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, namespace)
            elif isinstance(pattern, URLPattern) and pattern.name:
                yield pattern.name, list(pattern.pattern.converters.items())

    fill = {
        converters.IntConverter: 987654,
        converters.UUIDConverter: uuid.UUID(int=7),
        converters.StringConverter: "no-such-thing",
        converters.PathConverter: "no-such-thing",
    }
    seen = set()
    for name, params in walk(get_resolver().url_patterns):
        kwargs = {param: fill[type(converter)] for param, converter in params}
        try:
            url = reverse(name, kwargs=kwargs)
        except NoReverseMatch:  # a pattern of a namespace (admin): not an API route
            continue
        if url.startswith("/v1/") and url not in seen and name not in {"schema", "docs"}:
            seen.add(url)
            yield url, kwargs


def assert_standard(response: Any, context: str) -> dict[str, Any]:
    assert response["Content-Type"].startswith("application/json"), (context, response.content[:200])
    body = orjson.loads(response.content)
    assert isinstance(body, dict) and set(body) == {"code", "message", "details"}, (context, body)
    assert isinstance(body["code"], str) and body["code"], context
    assert isinstance(body["message"], str) and isinstance(body["details"], dict), context
    return body


def test_every_error_answer_under_v1_has_the_standard_shape() -> None:
    tenant = ContractFactory.create().tenant
    callers = {"anonymous": Client(), "owner token": token_client(tenant), "staff": staff_client()}
    routes = list(api_routes())
    assert len(routes) > 40
    statuses: dict[int, int] = {}
    for url, _ in routes:
        for who, client in callers.items():
            client.raise_request_exception = False
            for method in METHODS:
                response = client.generic(method.upper(), url, b"{}", content_type="application/json")
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                assert response.status_code < 500, (who, method, url, response.content[:300])
                if response.status_code >= 400:
                    assert_standard(response, f"{who} {method} {url} {response.status_code}")
    assert {401, 403, 404, 405} <= set(statuses), statuses


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("get", "/v1/ingest/batches", ["POST"]),  # Django's require_POST, no DRF view
        ("put", "/v1/entitlements/leases", ["POST"]),
        ("post", "/v1/entitlements/platform-key", ["GET"]),
        ("delete", "/v1/stripe/webhook", ["POST"]),
    ],
)
def test_djangos_own_405_gets_the_standard_body_and_keeps_allow(
    method: str, path: str, allowed: list[str]
) -> None:
    response = getattr(Client(), method)(path)
    assert response.status_code == 405
    body = assert_standard(response, path)
    assert body["code"] == "method_not_allowed"
    assert body["details"] == {"allowed": allowed}
    assert response["Allow"] == ", ".join(allowed)


def test_a_drf_405_keeps_its_own_standard_answer() -> None:
    response = token_client(TenantFactory.create()).delete("/v1/keys")
    body = assert_standard(response, "DELETE /v1/keys")
    assert (response.status_code, body["code"]) == (405, "method_not_allowed")


@pytest.mark.parametrize("debug", [False, True])
def test_an_unknown_v1_path_answers_404_not_found_even_in_debug(settings: Any, debug: bool) -> None:
    settings.DEBUG = debug
    response = Client().get("/v1/no/such/route")
    body = assert_standard(response, "unknown path")
    assert (response.status_code, body["code"], body["details"]) == (
        404,
        "not_found",
        {"path": "/v1/no/such/route"},
    )
    # Pages stay Django's.
    page = Client().get("/no/such/page")
    assert page.status_code == 404 and not page["Content-Type"].startswith("application/json")


@pytest.mark.parametrize(
    "url",
    [
        "/v1/contracts?package=pkg%01",
        "/v1/invoices?contract=%7Facme",
        "/v1/keys?status=active&contract=a%1Bb",
        "/v1/contracts?pac%00kage=x",
        "/v1/keys/abc%01/revoke",
        "/v1/contracts/acme%0D",
    ],
)
def test_control_characters_in_a_path_or_query_answer_400(url: str) -> None:
    client = token_client(TenantFactory.create())
    for method in ("get", "post"):
        response = getattr(client, method)(url)
        body = assert_standard(response, url)
        assert (response.status_code, body["code"]) == (400, "invalid_request"), url
        assert "Control characters" in body["message"]


def test_tab_and_newline_are_not_control_characters_to_refuse() -> None:
    client = token_client(TenantFactory.create())
    response = client.get("/v1/contracts?package=a%09b%0Ac")
    assert response.status_code == 200, response.content
    assert response.json()["results"] == []


def test_an_error_drf_would_render_as_html_is_sent_as_its_standard_json() -> None:
    """A browser asking for HTML (the browsable API) still gets the error's own code and details."""
    client = token_client(TenantFactory.create())
    response = client.post(
        "/v1/keys", data={}, content_type="application/json", headers={"Accept": "text/html"}
    )
    body = assert_standard(response, "POST /v1/keys as a browser")
    assert (response.status_code, body["code"]) == (400, "invalid_request")
    assert "contract" in body["details"]
