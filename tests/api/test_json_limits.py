"""One JSON parser with limits for every REST body (common.parsers): deep nesting, too many members,
a body too large and not-JSON answer 400 `malformed_json` or 413 `request_too_large`, never a 500.

The endpoints are the ones an outside test found answering 500 (RecursionError in the stdlib decoder
behind DRF's parser) for a body of `[` x 100,000 or `{"a":` nested 3,000 deep (issue 13).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.parsers import MultiPartParser
from rest_framework.views import APIView

from accounts.models import Role, Tenant
from agents.services import register_agent
from common.parsers import JsonFileParser, JsonParser
from entitlements.models import QuotaLease
from tests.api.conftest import token_client
from tests.factories import ContractFactory, MembershipFactory, TenantFactory
from treemeter_records import private_key_from_seed, protocol, public_key_to_b64
from treemeter_records.limits import JSON_MAX_DEPTH, JSON_MAX_MEMBERS
from webhooks.models import WebhookEndpoint

pytestmark = pytest.mark.django_db

DEEP_ARRAY = b"[" * 100_000
DEEP_OBJECT = b'{"a":' * 3000 + b"1" + b"}" * 3000


CSRF_SECRET = "c" * 32


def nested(depth: int) -> bytes:
    """A JSON object `depth` levels deep (depth 1 is {"a": 1})."""
    return b'{"a":' * depth + b"1" + b"}" * depth


def members(count: int) -> bytes:
    """A JSON object whose one array holds `count - 1` items: `count` members and items in all."""
    return orjson.dumps({"name": [0] * (count - 1)})


def session_client(tenant: Tenant | None) -> Client:
    """A signed-in user with CSRF checks on, as in a browser: DRF's CSRF check reads the body first."""
    client = Client(enforce_csrf_checks=True, headers={"X-CSRFToken": CSRF_SECRET})
    client.cookies[settings.CSRF_COOKIE_NAME] = CSRF_SECRET
    if tenant is None:
        client.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    else:
        client.force_login(MembershipFactory.create(tenant=tenant, role=Role.OWNER).user)
    return client


def staff() -> Client:
    return session_client(None)


def endpoint_path(tenant: Tenant) -> str:
    return (
        f"/v1/webhooks/endpoints/{WebhookEndpoint.objects.create(tenant=tenant, url='https://a.test/h').pk}"
    )


# (method, path for the tenant, who) of every endpoint the outside test found answering 500.
TENANT_ENDPOINTS: list[tuple[str, Callable[[Tenant], str]]] = [
    ("post", lambda _: "/v1/keys"),
    ("post", lambda _: "/v1/ledger/disputes"),
    ("post", lambda _: "/v1/outcomes"),
    ("post", lambda _: "/v1/purchases"),
    ("post", lambda _: "/v1/tokens"),
    ("post", lambda _: "/v1/webhooks/endpoints"),
    ("patch", endpoint_path),
]
STAFF_ENDPOINTS = [
    ("post", "/v1/agents"),
    ("post", "/v1/api-keys"),
    ("post", "/v1/ledger/checkpoints"),
    ("post", "/v1/ledger/disputes/1/resolve"),
]
REFUSED_BODIES = {
    "[ x 100,000": DEEP_ARRAY,
    '{"a": nested 3,000 deep': DEEP_OBJECT,
    f"nested {JSON_MAX_DEPTH + 1} deep": nested(JSON_MAX_DEPTH + 1),
    f"{JSON_MAX_MEMBERS + 1} members": members(JSON_MAX_MEMBERS + 1),
    "not JSON": b'{"name": ',
    "not UTF-8": b'{"name": "\xff"}',
    "NaN": b'{"name": NaN}',
}


def send(client: Client, method: str, path: str, body: bytes, **headers: str) -> Any:
    return getattr(client, method)(path, data=body, content_type="application/json", headers=headers)


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    body = response.json()
    assert set(body) == {"code", "message", "details"}
    assert body["code"] == code
    return body


@pytest.mark.parametrize("body", REFUSED_BODIES.values(), ids=REFUSED_BODIES.keys())
@pytest.mark.parametrize(
    ("method", "path"), TENANT_ENDPOINTS, ids=[f"{m} {i}" for i, (m, _) in enumerate(TENANT_ENDPOINTS)]
)
def test_tenant_endpoints_refuse_bad_json_with_400(
    method: str, path: Callable[[Tenant], str], body: bytes
) -> None:
    tenant = TenantFactory.create()
    for client in (token_client(tenant), session_client(tenant)):
        assert_error(send(client, method, path(tenant), body), 400, "malformed_json")


@pytest.mark.parametrize("body", REFUSED_BODIES.values(), ids=REFUSED_BODIES.keys())
@pytest.mark.parametrize(("method", "path"), STAFF_ENDPOINTS)
def test_staff_endpoints_refuse_bad_json_with_400(method: str, path: str, body: bytes) -> None:
    assert_error(send(staff(), method, path, body), 400, "malformed_json")


def test_the_limits_are_inclusive_and_named_in_the_answer() -> None:
    client = token_client(TenantFactory.create())
    at_depth = send(client, "post", "/v1/tokens", nested(JSON_MAX_DEPTH))
    at_members = send(client, "post", "/v1/tokens", members(JSON_MAX_MEMBERS))
    # At the limits the body is read: the serializer then refuses its fields, not the parser the JSON.
    assert_error(at_depth, 400, "invalid_request")
    assert_error(at_members, 400, "invalid_request")
    over = assert_error(send(client, "post", "/v1/tokens", nested(JSON_MAX_DEPTH + 1)), 400, "malformed_json")
    assert over["details"]["max_depth"] == JSON_MAX_DEPTH
    assert over["details"]["max_members"] == JSON_MAX_MEMBERS
    assert str(JSON_MAX_DEPTH) in over["message"]


@pytest.mark.parametrize(("method", "path"), TENANT_ENDPOINTS[:6:5])
def test_a_body_over_the_size_limit_answers_413(method: str, path: Callable[[Tenant], str]) -> None:
    tenant = TenantFactory.create()
    limit = settings.API_JSON_MAX_BYTES
    assert limit == 1024 * 1024  # the default
    huge_string = orjson.dumps({"name": "x" * limit, "url": "https://a.test/"})
    body = assert_error(
        send(token_client(tenant), method, path(tenant), huge_string), 413, "request_too_large"
    )
    assert body["details"] == {"max_bytes": limit}
    # Just under the limit it is read (and its fields judged).
    fits = orjson.dumps({"name": "x" * (limit - 100), "role": "owner"})
    assert send(token_client(tenant), method, path(tenant), fits).status_code == 400


def test_the_size_limit_is_a_setting(settings: Any) -> None:
    settings.API_JSON_MAX_BYTES = 2048
    contract = ContractFactory.create()
    client = token_client(contract.tenant)
    made = send(client, "post", "/v1/keys", orjson.dumps({"contract": contract.code, "name": "n" * 150}))
    assert made.status_code == 201, made.content
    padded = orjson.dumps({"contract": contract.code, "name": "n", "pad": "p" * 2048})
    assert_error(send(client, "post", "/v1/keys", padded), 413, "request_too_large")


def test_a_body_over_djangos_upload_limit_answers_413_not_an_html_400(settings: Any) -> None:
    """The idempotency middleware reads the body first: Django's RequestDataTooBig there ends as 413."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    client = token_client(TenantFactory.create())
    body = orjson.dumps({"name": "n" * 5000, "role": "read_only"})
    response = send(client, "post", "/v1/tokens", body, **{"Idempotency-Key": "big-1"})
    assert_error(response, 413, "request_too_large")
    assert response.json()["details"] == {"max_bytes": 4096}


def _agent_lease_request(path: str, body: bytes) -> Any:
    key = private_key_from_seed(os.urandom(32))
    contract = ContractFactory.create()
    register_agent(
        agent_id="limits-agent",
        public_key_b64=public_key_to_b64(key),
        tenant_codes=[],
        contract_codes=[contract.code],
    )
    headers = protocol.signed_headers(key, "limits-agent", "POST", path, body)
    return Client().post(path, data=body, content_type="application/json", headers=headers)


@pytest.mark.parametrize(
    "body", [DEEP_ARRAY, DEEP_OBJECT, nested(JSON_MAX_DEPTH + 1)], ids=["array", "object", "33"]
)
def test_the_agents_lease_calls_read_json_under_the_same_limits(body: bytes) -> None:
    """lease_views read the body themselves (it is signed): the same reader, the same answer."""
    assert_error(_agent_lease_request(protocol.LEASES_PATH, body), 400, "malformed_json")
    assert QuotaLease.objects.count() == 0


def test_a_signed_lease_call_over_the_size_limit_answers_413(settings: Any) -> None:
    settings.API_JSON_MAX_BYTES = 2048
    body = orjson.dumps({"key_hash": "0" * 64, "request_id": "r" * 3000})
    assert_error(_agent_lease_request(protocol.LEASES_PATH, body), 413, "request_too_large")


def _api_views() -> list[type[APIView]]:
    views: list[type[APIView]] = []

    def walk(patterns: list[Any]) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern):
                view_class = getattr(pattern.callback, "cls", None)
                if isinstance(view_class, type) and issubclass(view_class, APIView):
                    views.append(view_class)

    walk(get_resolver().url_patterns)
    return views


def test_every_rest_view_reads_json_with_the_one_parser() -> None:
    views = _api_views()
    assert len(views) > 40
    own_parsers = {v.__name__: v.parser_classes for v in views if list(v.parser_classes) != [JsonParser]}
    # The one body that is a file users keep, read by its own reader (common.parsers' docstring); the
    # package factory's upload of a model file, whose JSON declaration is read by common.parsers.loads.
    assert own_parsers == {"ModelPriceImportView": [JsonFileParser], "BuildListView": [MultiPartParser]}
