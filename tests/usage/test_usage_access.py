"""Tenant isolation, staff scope and bad parameters of the usage endpoints."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Role
from tests.factories import api_token_for
from tests.usage.conftest import World

pytestmark = pytest.mark.django_db

DAYS = {"start": "2026-11-30", "end": "2026-12-02"}
ENDPOINTS = [
    ("timeseries", {"dimension": "requests"}),
    ("experts", {}),
    ("routing", {}),
    ("latency", {}),
    ("breakdown", {"by": "contract"}),
]


def contracts_seen(client: Client, **params: Any) -> dict[str, str]:
    """{contract: requests} of the breakdown the client gets."""
    response = client.get("/v1/usage/breakdown", {"by": "contract", **DAYS, **params})
    assert response.status_code == 200, response.content
    return {row["key"]: row["requests"] for row in response.json()["rows"]}


def test_customers_see_their_own_tenant_only(world: World) -> None:
    assert contracts_seen(world.client(world.tenant_a)) == {"usage-a1": "6", "usage-a2": "3"}
    assert contracts_seen(world.client(world.tenant_b)) == {"usage-b1": "5"}
    # The package both tenants use: each sees its own records of it.
    b = world.client(world.tenant_b)
    body = b.get("/v1/usage/timeseries", {"dimension": "tokens_in", **DAYS}).json()
    assert body["series"] == [
        {
            "package": "usage-p1",
            "points": [["2026-11-30T00:00:00+00:00", "5000"], ["2026-12-01T00:00:00+00:00", "0"]],
        }
    ]
    assert b.get("/v1/usage/experts", DAYS).json()["cells"] == [[0, 1, 750], [0, 4, 440], [1, 2, 1190]]
    assert b.get("/v1/usage/routing", DAYS).json()["totals"] == {
        "requests": 5,
        "avg_hops": "5.000",
        "cache_hit_rate": "0.6667",
    }


def test_an_api_token_reads_its_tenant(world: World) -> None:
    secret = api_token_for(world.tenant_b, Role.READ_ONLY)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert contracts_seen(client) == {"usage-b1": "5"}


@pytest.mark.parametrize(("endpoint", "params"), ENDPOINTS)
def test_a_customer_naming_another_tenant_or_its_contract_sees_no_usage(
    world: World, endpoint: str, params: dict[str, str]
) -> None:
    """The list-filter rule (common.filters): what the caller cannot see answers as what does not exist,
    an answer over no records."""
    client = world.client(world.tenant_a)
    nothing = client.get(f"/v1/usage/{endpoint}", {**params, **DAYS, "contract": "no-such-contract"})
    assert nothing.status_code == 200, nothing.content
    for extra in (
        {"tenant": "usage-b"},
        {"contract": "usage-b1"},
        {"tenant": "usage-b", "contract": "usage-b1"},
    ):
        response = client.get(f"/v1/usage/{endpoint}", {**params, **DAYS, **extra})
        assert response.status_code == 200, response.content
        assert response.json() == nothing.json()
        assert "usage-b" not in response.content.decode()
    # Naming one's own tenant changes nothing.
    own = client.get(f"/v1/usage/{endpoint}", {**params, **DAYS, "tenant": "usage-a"})
    assert own.json() == client.get(f"/v1/usage/{endpoint}", {**params, **DAYS}).json()


def test_staff_see_every_tenant_or_the_one_named(world: World) -> None:
    staff = world.client(None)
    assert contracts_seen(staff) == {"usage-a1": "6", "usage-a2": "3", "usage-b1": "5"}
    assert contracts_seen(staff, tenant="usage-b") == {"usage-b1": "5"}
    assert contracts_seen(staff, contract="usage-a2") == {"usage-a2": "3"}
    assert contracts_seen(staff, tenant="nobody") == {}


def test_anonymous_and_tenantless_users_are_refused(world: World) -> None:
    assert Client().get("/v1/usage/experts").status_code in (401, 403)
    user = get_user_model().objects.create_user("usage-nobody")
    client = Client()
    client.force_login(user)
    response = client.get("/v1/usage/experts")
    assert (response.status_code, response.json()["code"]) == (403, "no_tenant")


@pytest.mark.parametrize(
    ("endpoint", "params", "code", "field"),
    [
        ("timeseries", {}, "invalid_request", "dimension"),
        ("timeseries", {"dimension": "watts"}, "invalid_request", "dimension"),
        ("timeseries", {"dimension": "requests", "interval": "week"}, "invalid_request", "interval"),
        ("routing", {"interval": "minute"}, "invalid_request", "interval"),
        ("breakdown", {"by": "tenant"}, "invalid_request", "by"),
        ("experts", {"start": "last tuesday"}, "invalid_request", "start"),
        ("experts", {"start": "2026-11-02", "end": "2026-11-01"}, "invalid_request", "end"),
        (
            "experts",
            {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T00:00:00Z"},
            "invalid_request",
            "end",
        ),
        ("latency", {"start": "2024-01-01", "end": "2026-01-01"}, "invalid_request", "end"),
        ("routing", {"start": "0001-01-01T00:00:00Z"}, "invalid_request", "start"),
        ("routing", {"end": "9999-12-31T23:59:59Z"}, "invalid_request", "end"),
        ("breakdown", {"by": "day", "start": "1970-01-02"}, "invalid_request", "start"),
    ],
)
def test_bad_parameters_answer_400_with_a_code(
    world: World, endpoint: str, params: dict[str, str], code: str, field: str
) -> None:
    response = world.client(world.tenant_a).get(f"/v1/usage/{endpoint}", params)
    assert response.status_code == 400, response.content
    body = response.json()
    assert (body["code"], set(body)) == (code, {"code", "message", "details"})
    assert field in body["details"]
