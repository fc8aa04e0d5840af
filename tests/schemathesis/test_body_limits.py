"""The body-limits phase of `make schemathesis` (tools/schemathesis_run.check_body_limits), here in full:
every POST, PUT and PATCH operation of the live schema, as the owner's token and as a staff session, gets
deep nesting, a body over the size limit, the JSON limits one past, and each field one past its stated
limit; no answer is a 5xx or accepts the body, and every error answer has the standard shape."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle

from accounts.models import Role
from common.errors import document_error_responses
from tools import schemathesis_run

pytestmark = [
    pytest.mark.schemathesis,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("clickhouse"),
]


def test_every_write_operation_refuses_bodies_past_every_limit(
    live_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(AnonRateThrottle.THROTTLE_RATES, "anon", "1000000/min")
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "1000000/min")
    data = schemathesis_run.seed_data()
    outcome = schemathesis_run.check_body_limits(live_server.url, data, data.tokens[Role.OWNER])
    print(outcome.output)
    assert outcome.returncode == 0, outcome.output
    sent = int(outcome.output.rsplit("body limits: ", 1)[1].split(" requests")[0])
    assert sent >= 20 * 2 * 5  # every write operation, both callers, at least the five shared bodies


def _operation(method: str, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = document_error_responses(SchemaGenerator().get_schema(request=None, public=True))
    return schema, schema["paths"][path][method]


def test_field_bodies_put_each_stated_limit_one_past() -> None:
    schema, operation = _operation("post", "/v1/keys")
    bodies = {
        label: orjson.loads(body) for label, body in schemathesis_run.field_bodies(schema, operation).items()
    }
    assert len(bodies["name one past its limit"]["name"]) == 201
    assert len(bodies["contract one past its limit"]["contract"]) == 65
    assert bodies["quota_tokens one past its limit"]["quota_tokens"] == -1
    every = bodies["every field one past its limit"]
    assert (len(every["name"]), len(every["sla_class"]), every["quota_tokens"]) == (201, 65, -1)
    schema, operation = _operation("post", "/v1/webhooks/endpoints")
    url = orjson.loads(schemathesis_run.field_bodies(schema, operation)["url one past its limit"])["url"]
    assert url.startswith("https://") and len(url) == 501


def test_the_shared_bodies_are_past_the_parsers_limits() -> None:
    bodies = schemathesis_run.limit_bodies(1024)
    assert bodies["[ x 100,000"] == b"[" * 100_000
    assert len(bodies["a string over 1024 bytes"]) > 1024
    assert orjson.loads(bodies["10001 members"])["items"] == [0] * 10_000
