"""Schemathesis against the live API's OpenAPI spec: zero 5xx and zero schema violations is the target.

    python -m tools.testenv -- .venv/bin/python -m tools.schemathesis_run [--max-examples N] [--seed S]

In one process (chDB allows one per data path): a throwaway test database (Django's test database
creation, on the PostgreSQL that tools.testenv provides), ClickHouse migrations, two tenants with a complete
data set (tests/schemathesis/tenant_data.py), and the platform served on 127.0.0.1 from a thread. Then
`st run` (the schemathesis CLI, a subprocess) tests every operation of /v1/schema as the first tenant's
owner (an API token in the Authorization header) and unauthenticated, with positive and negative
(malformed) inputs. It prints every run's summary and exits non-zero when any run failed.

Then a phase of its own (`body_limits`, no schemathesis): every POST, PUT and PATCH operation of the schema
gets, as the owner's token and as a staff session, bodies past every limit: `[` x 100,000, `{"a":` nested
3,000 deep, nesting and member counts one past the JSON limits (common.parsers), a string over the body
size limit, and for each field of the operation's request schema a value one past its maxLength,
maximum or maxItems. No answer may be a 5xx, and every error answer must be {code, message, details}.

Rate limits are raised for the run (they are tested on their own); nothing else is changed.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from treemeter_records.limits import JSON_MAX_DEPTH, JSON_MAX_MEMBERS

if TYPE_CHECKING:
    from tests.schemathesis.tenant_data import TenantData

REPO_ROOT = Path(__file__).resolve().parents[1]
ERROR_HOOK = "common.errors.document_error_responses"
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
)


MISSING_HOOK = f"SPECTACULAR_SETTINGS['POSTPROCESSING_HOOKS'] lacks {ERROR_HOOK}: added for this run only."


@dataclass(frozen=True)
class Outcome:
    label: str
    returncode: int
    output: str


def _django() -> None:
    for path in (REPO_ROOT / "verifier", REPO_ROOT / "platform", REPO_ROOT):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("API_RATE_USER", "1000000/min")
    os.environ.setdefault("API_RATE_ANON", "1000000/min")
    import django

    django.setup()


def error_hook_registered() -> bool:
    """Whether settings register the hook that documents error answers (common.errors)."""
    from django.conf import settings

    return ERROR_HOOK in settings.SPECTACULAR_SETTINGS.get("POSTPROCESSING_HOOKS", [])


def hooks_with_error_hook() -> list[Any]:
    """drf-spectacular's postprocessing hooks plus common.errors.document_error_responses."""
    from drf_spectacular.settings import spectacular_settings

    from common.errors import document_error_responses

    return [*spectacular_settings.POSTPROCESSING_HOOKS, document_error_responses]


def ensure_error_hook() -> bool:
    """As error_hook_registered(); when it is not, the hook is added to drf-spectacular's live settings
    for the rest of this process (without it every 4xx answer reads as a schema violation)."""
    from drf_spectacular.settings import spectacular_settings

    if error_hook_registered():
        return True
    spectacular_settings.POSTPROCESSING_HOOKS = hooks_with_error_hook()  # type: ignore[attr-defined]
    return False


@contextmanager
def test_database() -> Iterator[None]:
    """A fresh PostgreSQL test database and migrated ClickHouse, dropped at the end."""
    from django.db import connection
    from django.test.utils import setup_test_environment, teardown_test_environment

    from clickhouse_store.migrator import apply_migrations

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        apply_migrations()
        yield
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()


@contextmanager
def live_server() -> Iterator[str]:
    """The platform's WSGI application on 127.0.0.1 (an ephemeral port), served from threads."""
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.core.wsgi import get_wsgi_application

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=False)
    server.set_app(get_wsgi_application())
    # Every 4xx is logged as a warning, and schemathesis sends thousands on purpose; 5xx still are.
    # (Set after the application loads: loading it configures logging again.)
    logging.getLogger("django.request").setLevel(logging.ERROR)
    thread = threading.Thread(target=server.serve_forever, name="schemathesis-live-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def run_schemathesis(
    base_url: str,
    label: str,
    *,
    token: str | None,
    max_examples: int,
    seed: int,
    report_dir: Path,
    extra: Sequence[str] = (),
    phases: str = "examples,coverage,fuzzing",
) -> Outcome:
    """`st run` against the live schema, as `label`; its whole output is kept."""
    command = [
        str(Path(sys.executable).with_name("st")),
        "--no-color",
        "run",
        f"{base_url}/v1/schema",
        "--checks",
        ",".join(CHECKS),
        "--mode",
        "all",
        "--phases",
        phases,
        "--max-examples",
        str(max_examples),
        "--seed",
        str(seed),
        "--workers",
        "1",
        "--suppress-health-check",
        "all",
        "--request-timeout",
        "60",
        "--report",
        "junit",
        "--report-junit-path",
        str(report_dir / f"schemathesis-{label}.xml"),
        "--output-truncate",
        "true",
    ]
    if token is not None:
        command += ["--header", f"Authorization: Bearer {token}"]
    command += list(extra)
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    return Outcome(label, done.returncode, done.stdout + done.stderr)


def seed_tenants() -> str:
    """Two tenants with complete data sets; the first one's owner API token."""
    from accounts.models import Role

    return seed_data().tokens[Role.OWNER]


def seed_data() -> TenantData:
    """Two tenants with complete data sets; the first one's."""
    from tests.schemathesis.tenant_data import build_tenant

    first = build_tenant("alpha")
    build_tenant("bravo")
    return first


# An owner may revoke the tenant's own tokens, the run's credential among them (schemathesis reuses the
# prefixes GET /v1/tokens lists): that operation is tested last, on its own.
SELF_REVOKING = "^/v1/tokens/[^/]+/revoke$"


def runs(token: str) -> list[tuple[str, str | None, list[str]]]:
    """(label, API token or None, `st run` operation selection) of each run, in order."""
    return [
        ("owner-token", token, ["--exclude-path-regex", SELF_REVOKING]),
        ("owner-token-revoke", token, ["--include-path-regex", SELF_REVOKING]),
        ("anonymous", None, []),
    ]


# --- body limits: every write operation of the schema, bodies past every limit -------------------------

WRITE_METHODS = ("post", "put", "patch")
# Path parameters that must name a real object for the view to read the body (it looks the object up
# first); the rest name nothing (the body is read before the look-up, or never).
PATH_OBJECTS = {
    "/v1/webhooks/endpoints/{id}": lambda data: {"id": data.webhook.pk},
    "/v1/outcomes/{id}/confirm": lambda data: {"id": data.outcome.pk},
    "/v1/outcomes/{id}/revoke": lambda data: {"id": data.outcome.pk},
    "/v1/ledger/disputes/{id}/resolve": lambda data: {"id": data.dispute.pk},
    "/v1/contracts/{code}/terms": lambda data: {"code": data.contract.code},
    "/v1/contracts/{code}/credits": lambda data: {"code": data.contract.code},
    "/v1/contracts/{code}/charges/{dimension}": lambda data: {"code": data.contract.code},
    "/v1/contracts/{code}/metrics/{metric}": lambda data: {"code": data.contract.code},
}
NOTHING = {"integer": "987654321", "string": "no-such-thing"}


def limit_bodies(max_bytes: int) -> dict[str, bytes]:
    """Bodies every write operation is sent, whatever its schema."""
    return {
        "[ x 100,000": b"[" * 100_000,
        '{"a": nested 3,000 deep': b'{"a":' * 3000 + b"1" + b"}" * 3000,
        f"nested {JSON_MAX_DEPTH + 1} deep": b"[" * (JSON_MAX_DEPTH + 1) + b"]" * (JSON_MAX_DEPTH + 1),
        f"{JSON_MAX_MEMBERS + 1} members": b'{"items": [' + b",".join([b"0"] * JSON_MAX_MEMBERS) + b"]}",
        f"a string over {max_bytes} bytes": b'{"name": "' + b"a" * (max_bytes + 1) + b'"}',
    }


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    if "allOf" in node and len(node["allOf"]) == 1:
        return _resolve(schema, node["allOf"][0])
    return node


def _plain(schema: dict[str, Any], node: dict[str, Any]) -> Any:
    """A short value of the property's type (limits aside, it may still be refused)."""
    node = _resolve(schema, node)
    if node.get("enum"):
        return node["enum"][0]
    kind = node.get("type")
    if kind == "integer":
        return node.get("minimum", 1)
    if kind == "number":
        return 1
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return {"date-time": "2026-11-01T00:00:00Z", "uri": "https://hooks.example.com/x"}.get(
        node.get("format", ""), "a"
    )


def _past_limit(schema: dict[str, Any], node: dict[str, Any]) -> Any:
    """A value one past the property's limit, or None when it states none."""
    node = _resolve(schema, node)
    kind = node.get("type")
    if kind == "string" and "maxLength" in node:
        prefix = "https://hooks.example.com/" if node.get("format") == "uri" else ""
        return prefix + "a" * (node["maxLength"] + 1 - len(prefix))
    if kind in ("integer", "number") and "maximum" in node:
        return node["maximum"] + 1
    if kind in ("integer", "number") and "minimum" in node:
        return node["minimum"] - 1
    if kind == "array" and "maxItems" in node:
        return [_plain(schema, node.get("items", {}))] * (node["maxItems"] + 1)
    if kind == "array":
        item = _past_limit(schema, node.get("items", {}))
        return None if item is None else [item]
    return None


def field_bodies(schema: dict[str, Any], operation: dict[str, Any]) -> dict[str, bytes]:
    """For each property of the request body that states a limit: the body with that property one past
    it and the others short; and one body with every property past its limit at once."""
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return {}
    body_schema = _resolve(schema, content.get("schema", {}))
    properties = body_schema.get("properties", {})
    plain = {
        name: _plain(schema, node)
        for name, node in properties.items()
        if not _resolve(schema, node).get("readOnly")
    }
    past = {name: _past_limit(schema, properties[name]) for name in plain}
    past = {name: value for name, value in past.items() if value is not None}
    bodies = {
        f"{name} one past its limit": orjson.dumps({**plain, name: value}) for name, value in past.items()
    }
    if past:
        bodies["every field one past its limit"] = orjson.dumps({**plain, **past})
    return bodies


def staff_session() -> tuple[dict[str, str], dict[str, str]]:
    """Cookies and headers of a signed-in staff user (a session made in the database, and a CSRF secret
    in cookie and header, as a browser would send them)."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    user = get_user_model().objects.create_user("body-limits-staff", is_staff=True)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    secret = "b" * 32
    cookies = {settings.SESSION_COOKIE_NAME: session.session_key or "", settings.CSRF_COOKIE_NAME: secret}
    return cookies, {"X-CSRFToken": secret}


def check_body_limits(base_url: str, data: TenantData, token: str) -> Outcome:
    """The body-limits phase: every write operation × both credentials × every body. Failures: a 5xx, or
    an error answer that is not {code, message, details}."""
    from django.conf import settings

    cookies, staff_headers = staff_session()
    callers = {
        "owner-token": ({"Authorization": f"Bearer {token}"}, {}),
        "staff-session": (staff_headers, cookies),
    }
    lines: list[str] = []
    failures = 0
    sent = 0
    with httpx.Client(base_url=base_url, timeout=60) as client:
        schema = client.get("/v1/schema", params={"format": "json"}, headers=callers["owner-token"][0])
        schema.raise_for_status()
        spec = orjson.loads(schema.content)
        for template, methods in sorted(spec["paths"].items()):
            if re.search(SELF_REVOKING, template):
                continue  # would revoke the run's own credential; it reads no body
            for method, operation in methods.items():
                if method not in WRITE_METHODS:
                    continue
                values = {
                    p["name"]: NOTHING.get(p.get("schema", {}).get("type", "string"), "no-such-thing")
                    for p in operation.get("parameters", [])
                    if p.get("in") == "path"
                }
                values |= {k: str(v) for k, v in PATH_OBJECTS.get(template, lambda _: {})(data).items()}
                path = template.format(**values)
                bodies = {**limit_bodies(settings.API_JSON_MAX_BYTES), **field_bodies(spec, operation)}
                for who, (headers, jar) in callers.items():
                    client.cookies.clear()
                    for name, value in jar.items():
                        client.cookies.set(name, value)
                    for label, body in bodies.items():
                        sent += 1
                        answer = client.request(
                            method.upper(),
                            path,
                            content=body,
                            headers={**headers, "Content-Type": "application/json"},
                        )
                        problem = _answer_problem(answer)
                        if problem:
                            failures += 1
                            lines.append(f"FAIL {who} {method.upper()} {path} [{label}]: {problem}")
    lines.append(f"body limits: {sent} requests, {failures} failures")
    return Outcome("body-limits", 1 if failures else 0, "\n".join(lines))


def _answer_problem(answer: Any) -> str:

    if answer.status_code >= 500:
        return f"{answer.status_code}: {answer.text[:200]}"
    if answer.status_code < 400:
        return f"{answer.status_code}: a body past a limit was accepted: {answer.text[:120]}"
    try:
        body = orjson.loads(answer.content)
    except orjson.JSONDecodeError:
        return f"{answer.status_code} without a JSON body: {answer.text[:120]!r}"
    if not (isinstance(body, dict) and set(body) == {"code", "message", "details"}):
        return f"{answer.status_code} not in the standard shape: {answer.text[:200]}"
    return ""


def run(max_examples: int, seed: int, report_dir: Path, extra: Sequence[str] = ()) -> list[Outcome]:
    """The whole run (Django must be set up): database, seed data, server, both schemathesis runs."""
    report_dir.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    if not ensure_error_hook():
        outcomes.append(Outcome("configuration", 1, MISSING_HOOK))
    from accounts.models import Role

    with test_database():
        data = seed_data()
        token = data.tokens[Role.OWNER]
        with live_server() as base_url:
            for label, credential, selection in runs(token):
                outcomes.append(
                    run_schemathesis(
                        base_url,
                        label,
                        token=credential,
                        max_examples=max_examples,
                        seed=seed,
                        report_dir=report_dir,
                        extra=[*selection, *extra],
                    )
                )
            outcomes.append(check_body_limits(base_url, data, token))
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-examples", type=int, default=25, help="test cases per operation and phase")
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument(
        "--report-dir",
        type=Path,
        default=REPO_ROOT / "var" / "test-output" / "schemathesis",
        help="JUnit reports go here",
    )
    parser.add_argument("st_args", nargs="*", help="passed on to `st run` (after --)")
    options = parser.parse_args(argv)
    _django()
    outcomes = run(options.max_examples, options.seed, options.report_dir, options.st_args)
    for outcome in outcomes:
        print(f"===== schemathesis: {outcome.label} (exit {outcome.returncode}) =====")
        print(outcome.output.rstrip())
    failed = [o.label for o in outcomes if o.returncode != 0]
    print(f"===== summary: {len(outcomes) - len(failed)} passed, failed: {', '.join(failed) or 'none'} =====")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
