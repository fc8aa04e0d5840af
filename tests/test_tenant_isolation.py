"""Every URL pattern × every role × every method: no tenant reads or changes another tenant's data.

Two tenants get a complete data set (tests/schemathesis/tenant_data.py). The attacker ("alpha") calls
every pattern of config.urls, in every role, signed in and with an API token, and anonymously, with the
URL filled with the victim's ("bravo") objects and with bodies and filters naming them. The test fails
when:
- an answer holds one of the victim's identifiers (codes, numbers, record ids, secrets, user names) that
  the request did not itself send (pages echo their own URL, and errors the id they could not find);
- a request aimed at one of the victim's objects succeeds (2xx);
- any of the victim's rows (every model with a path to its tenant) or ClickHouse records changed;
- an anonymous caller gets anything but 401/403 (API) or a redirect to sign-in (pages), except for the
  patterns in PUBLIC, each with the reason it is public;
- an answer is a 5xx;
- a URL pattern appears that FILLERS, PUBLIC or the admin rule do not cover: a new endpoint must say how
  its parameters are filled before it ships.
Staff fetch every filled URL first (2xx or 405): a filler that names no real object fails, so the
attacker's 404s mean something.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import models
from django.http import HttpResponseBase
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from accounts.models import Role, Tenant
from clickhouse_store import query
from ledger.models import Checkpoint
from tests.schemathesis.tenant_data import ROLES, TenantData, build_tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]

METHODS = ("get", "post", "put", "patch", "delete")
ADMIN_METHODS = ("get", "post")


@dataclass(frozen=True)
class Fill:
    """How to aim a pattern at a tenant's objects: URL kwargs, and optional query and body."""

    kwargs: Callable[[TenantData], dict[str, Any]] = lambda _: {}
    query: Callable[[TenantData], dict[str, str]] = lambda _: {}
    body: Callable[[TenantData], dict[str, Any]] | None = None
    # A global read: the same answer for every tenant (hashes only), so a 2xx is no cross-tenant read.
    shared: bool = False


def _latest_size(_: TenantData) -> dict[str, Any]:
    return {"size": Checkpoint.objects.order_by("-size").values_list("size", flat=True)[0]}


def _sandbox_of(data: TenantData) -> dict[str, str]:
    return {"tenant": data.tenant.code}


def _window(_: TenantData) -> dict[str, str]:
    return {"start": "2026-11-01T00:00:00Z", "end": "2026-12-01T00:00:00Z"}


FILLERS: dict[str, Fill] = {
    # billing / contracts / catalogue / accounts
    "contract-list": Fill(),
    "contract-detail": Fill(lambda d: {"code": d.contract.code}),
    "contract-events": Fill(lambda d: {"code": d.contract.code}, query=lambda _: {"month": "2026-11"}),
    "invoice-list": Fill(),
    "credit-note-list": Fill(),
    "credit-note-detail": Fill(lambda d: {"pk": d.credit_note.pk}),
    "package-list": Fill(),
    # The catalogue is the same for every tenant: a package is not a tenant's object.
    "package-detail": Fill(lambda d: {"code": d.package.code}, shared=True),
    # The LLM price catalogue is the same for every tenant too (import: staff only).
    "model-price-list": Fill(),
    "model-price-export": Fill(query=lambda _: {"currency": "CNY"}),
    "model-price-import": Fill(query=lambda _: {"currency": "CNY", "effective_from": "2026-12-01"}),
    "purchase": Fill(body=lambda d: {"package": d.package.code}),
    # The package factory: a tenant's builds and the model files its capabilities use.
    "factory-templates": Fill(),
    "factory-builds": Fill(),
    "factory-build": Fill(lambda d: {"code": d.built.package.code}),
    "factory-artifact": Fill(lambda d: {"sha256": d.built.capability.artifact_id}),
    # The sandbox: the caller's tenant's (staff name it); the hostile query names the victim's tenant.
    "sandbox": Fill(query=_sandbox_of, body=lambda d: {"packages": [d.built.package.code]}),
    "sandbox-keys": Fill(query=_sandbox_of, body=lambda d: {"package": d.built.package.code}),
    "sandbox-reset": Fill(query=_sandbox_of),
    "sandbox-projection": Fill(query=lambda d: {**_sandbox_of(d), "packages": d.built.package.code}),
    "token-list": Fill(),
    "token-revoke": Fill(lambda d: {"prefix": d.token_rows[Role.READ_ONLY].prefix}),
    "invoice-detail": Fill(lambda d: {"pk": d.invoice.pk}),
    "invoice-pdf": Fill(lambda d: {"pk": d.invoice.pk}),
    "contract-charge": Fill(lambda d: {"code": d.contract.code, "dimension": "requests"}),
    "contract-metric": Fill(lambda d: {"code": d.contract.code, "metric": "answers"}),
    "contract-terms": Fill(lambda d: {"code": d.contract.code}),
    "contract-taxes": Fill(lambda d: {"code": d.contract.code}),
    "contract-credits": Fill(lambda d: {"code": d.contract.code}, body=lambda d: {"amount": "5.00"}),
    "outcome-declare": Fill(),
    "outcome-confirm": Fill(lambda d: {"pk": d.outcome.pk}),
    "outcome-revoke": Fill(lambda d: {"pk": d.outcome.pk}),
    # entitlements and agents
    "agent-register": Fill(),
    "model-publisher-keys": Fill(),
    "model-manifest-refusals": Fill(),
    "agent-manifest-refusals": Fill(),
    "api-key-issue": Fill(),
    "api-key-revoke": Fill(lambda d: {"prefix": d.api_key.prefix}),
    # Agent-signed (PUBLIC below): no session or token reaches them; the lease id is any UUID.
    "entitlements-lease-settle": Fill(lambda _: {"lease_id": "00000000-0000-4000-8000-000000000000"}),
    "key-list": Fill(),
    "key-revoke": Fill(lambda d: {"prefix": d.api_key.prefix}),
    # usage dashboard: the hostile query names the victim's contract and tenant
    "usage-timeseries": Fill(),
    "usage-experts": Fill(),
    "usage-routing": Fill(),
    "usage-latency": Fill(),
    "usage-breakdown": Fill(),
    "usage-subtrees": Fill(),
    # gray releases (a plan per tenant)
    "release-plan-list": Fill(),
    "release-plan-detail": Fill(lambda d: {"code": release_code(d)}),
    "release-plan-promote": Fill(lambda d: {"code": release_code(d)}),
    "release-stage-notes": Fill(
        lambda d: {"code": release_code(d), "position": 1}, body=lambda _: {"text": "n"}
    ),
    # webhooks
    "webhook-endpoint-list": Fill(),
    "webhook-endpoint-detail": Fill(lambda d: {"pk": d.webhook.pk}),
    "webhook-endpoint-deliveries": Fill(lambda d: {"pk": d.webhook.pk}),
    "webhook-delivery-replay": Fill(lambda d: {"pk": d.delivery.pk}),
    # ledger
    "ledger-checkpoints": Fill(),
    "ledger-checkpoint": Fill(_latest_size, shared=True),
    "ledger-consistency": Fill(query=lambda _: {"from": "1", "to": "2"}),
    "ledger-latest-checkpoint": Fill(shared=True),
    "ledger-inclusion": Fill(lambda d: {"record_id": d.record_ids[0]}),
    "ledger-invoice-export": Fill(lambda d: {"pk": d.invoice.pk}),
    "ledger-invoice-completeness": Fill(lambda d: {"pk": d.invoice.pk}),
    "ledger-completeness": Fill(lambda d: {"agent_id": d.agent.agent_id}, query=_window),
    "ledger-events": Fill(),
    "ledger-disputes": Fill(),
    "ledger-receipt-check": Fill(body=lambda d: {"receipt": d.receipt}),
    "ledger-receipt-dispute": Fill(body=lambda d: {"receipt": d.missing_receipts[0]}),
    "ledger-dispute": Fill(lambda d: {"pk": d.dispute.pk}),
    "ledger-dispute-resolve": Fill(
        lambda d: {"pk": d.dispute.pk}, body=lambda _: {"decision": "accept", "comment": "mine now"}
    ),
    # SLA
    "sla-report-list": Fill(),
    "sla-report-detail": Fill(lambda d: {"pk": d.sla_report.pk}),
    "sla-report-pdf": Fill(lambda d: {"pk": d.sla_report.pk}),
    "sla-report-page": Fill(lambda d: {"pk": d.sla_report.pk}),
    "sla-exclusion-list": Fill(),
    "sla-dependency-list": Fill(),
    "sla-exclusion-appeal": Fill(
        lambda d: {"pk": d.outage.pk}, body=lambda d: {"reason": f"{d.label} appeals"}
    ),
    "sla-dependency": Fill(
        lambda d: {"code": d.contract.code},
        body=lambda d: {"name": f"{d.label} HIS", "health_url": f"http://127.0.0.1:9/{d.label}/health"},
    ),
    "sla-alert-list": Fill(),
    "sla-credit-list": Fill(),
    # finance (platform staff only)
    "finance:index": Fill(),
    "finance:invoices": Fill(),
    "finance:invoices-download": Fill(lambda _: {"fmt": "csv"}),
    "finance:revenue": Fill(),
    "finance:revenue-download": Fill(lambda _: {"fmt": "csv"}),
    "finance:costs": Fill(),
    "finance:costs-download": Fill(lambda _: {"fmt": "csv"}),
    "finance:cost-split": Fill(),
    "finance:cost-split-download": Fill(lambda _: {"fmt": "csv"}),
    "finance:disputes": Fill(),
    "finance:disputes-download": Fill(lambda _: {"fmt": "csv"}),
    "finance:reconciliation": Fill(),
    "finance:reconciliation-download": Fill(lambda _: {"fmt": "csv"}),
    "finance:scheduler": Fill(),
    "finance:scheduler-download": Fill(lambda _: {"fmt": "csv"}),
    "finance:packages": Fill(),
    "finance:packages-download": Fill(lambda _: {"fmt": "csv"}),
    "finance:dispute-resolve": Fill(lambda d: {"pk": d.dispute.pk}),
    # the portal (frontend/): forms post form-encoded bodies
    "portal-home": Fill(),
    "portal-packages": Fill(),
    "portal-factory": Fill(),
    "portal-factory-build": Fill(lambda d: {"code": d.built.package.code}),
    "portal-sandbox": Fill(
        query=lambda d: {"package": d.built.package.code},
        body=lambda d: {"action": "key", "package": d.built.package.code},
    ),
    "portal-buy": Fill(),
    "portal-model-prices": Fill(),
    "portal-contracts": Fill(),
    "portal-contract": Fill(lambda d: {"code": d.contract.code}),
    "portal-usage": Fill(),
    "portal-invoices": Fill(),
    "portal-invoice": Fill(lambda d: {"pk": d.invoice.pk}),
    "portal-invoice-pdf": Fill(lambda d: {"pk": d.invoice.pk}),
    "portal-invoice-pay": Fill(lambda d: {"pk": d.invoice.pk}),
    "portal-line-records": Fill(lambda d: {"pk": d.invoice.pk, "line_pk": d.free_line.pk}),
    "portal-record": Fill(lambda d: {"record_id": d.record_ids[0]}),
    "portal-dispute-line": Fill(lambda d: {"pk": d.invoice.pk, "line_pk": d.free_line.pk}),
    "portal-notes": Fill(),
    "portal-note-pdf": Fill(lambda d: {"pk": d.credit_note.pk}),
    "portal-disputes": Fill(),
    "portal-dispute": Fill(lambda d: {"pk": d.dispute.pk}),
    "portal-sla-reports": Fill(),
    "portal-sla-report": Fill(lambda d: {"pk": d.sla_report.pk}),
    "portal-sla-report-pdf": Fill(lambda d: {"pk": d.sla_report.pk}),
    "portal-outage-appeal": Fill(lambda d: {"pk": d.outage.pk}),
    "portal-receipts": Fill(body=lambda d: {"receipt": d.receipt}),
    "portal-receipt-dispute": Fill(body=lambda d: {"receipt": d.missing_receipts[1]}),
    "portal-keys": Fill(),
    "portal-key-revoke": Fill(lambda d: {"prefix": d.api_key.prefix}),
    "portal-releases": Fill(),
    "portal-release-stage": Fill(lambda d: {"code": release_code(d), "position": 1}),
    "portal-release-stage-pdf": Fill(lambda d: {"code": release_code(d), "position": 1}),
    "portal-webhooks": Fill(),
    "portal-webhook": Fill(lambda d: {"pk": d.webhook.pk}),
    "portal-delivery-replay": Fill(lambda d: {"pk": d.delivery.pk}),
}

# Patterns anyone may call without signing in, and why. They are still swept: no leak, no write, no 5xx.
PUBLIC: dict[str, str] = {
    "ingest-batches": "agents authenticate by the Ed25519 signature of the batch itself",
    "entitlements-snapshot": "agents authenticate by a signed request header (treemeter_records.protocol)",
    "entitlements-platform-key": "the platform's public verification key, published on purpose",
    "entitlements-lease-grant": "agents authenticate by a signed request, the body's hash included",
    "entitlements-lease-settle": "agents authenticate by a signed request, the body's hash included",
    "agents-scheduler-events": "an L1 router authenticates by a signed request, the body's hash included",
    "agent-manifest-refusals": "an agent authenticates by a signed request, the body's hash included",
    "stripe-webhook": "Stripe authenticates by the Stripe-Signature header",
    "ledger-checkpoint-key": "the public key that signs the log's checkpoints, published on purpose",
    "ledger-latest-checkpoint": "the log's latest signed checkpoint: its size and root, for witnesses",
    "ledger-checkpoints": "the signed checkpoints (GET; publishing is staff's): sizes and roots only",
    "ledger-checkpoint": "one signed checkpoint: a size and a root, no tenant's data",
    "ledger-consistency": "consistency proofs between log sizes: hashes of subtrees, no tenant's data",
    "schema": "the OpenAPI description of the API: no data",
    "docs": "the Swagger UI page: no data",
    "set_language": "Django's language switcher: sets a cookie, no data",
    "admin:login": "the admin's sign-in form (every other admin view is staff-only)",
    "admin:logout": "signing out of the admin needs no staff rights; it shows no data",
    "portal-login": "the portal's sign-in form",
    "portal-logout": "signing out needs no session",
    "favicon": "the site's icon: no data",
    "metrics": "Prometheus counts by answer code and reason, no tenant's data; METRICS_TOKEN in production",
}

# The Django admin is staff-only (AdminSite.admin_view): every principal here must be sent to its login.
# Its gate is `is_staff`, which no tenant role has, so one role per kind of credential is enough there.
ADMIN_NAMESPACE = "admin"
ADMIN_PRINCIPALS = ("owner (session)", "read_only (token)", "anonymous")


@dataclass(frozen=True)
class Route:
    name: str  # "admin:<name>" inside the admin
    route: str
    pattern: URLPattern
    namespace: str

    @property
    def parameters(self) -> list[str]:
        return list(self.pattern.pattern.regex.groupindex)

    def url(self, kwargs: dict[str, Any]) -> str:
        return reverse(self.name, kwargs=kwargs)


def _walk(resolver: URLResolver, prefix: str = "", namespace: str = "") -> Iterator[Route]:
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            inner = entry.namespace or namespace
            yield from _walk(entry, prefix + str(entry.pattern), inner)
        else:
            route = prefix + str(entry.pattern)
            name = f"{namespace}:{entry.name}" if namespace and entry.name else entry.name or route
            yield Route(name, route, entry, namespace)


def all_routes() -> list[Route]:
    return list(_walk(get_resolver()))


# --- the victim's state ------------------------------------------------------------------------------


def _tenant_path(model: type[models.Model], depth: int = 4) -> str | None:
    """The ORM lookup from `model` to accounts.Tenant over forward relations (None: not tenant-owned)."""
    if model is Tenant:
        return "pk"
    if model is User:
        return "membership__tenant"
    frontier: list[tuple[type[models.Model], str]] = [(model, "")]
    for _ in range(depth):
        following: list[tuple[type[models.Model], str]] = []
        for current, path in frontier:
            for f in current._meta.get_fields():
                if not (f.is_relation and f.concrete and f.related_model) or f.related_model == "self":
                    continue
                lookup = f"{path}__{f.name}" if path else f.name
                if f.related_model is Tenant:
                    return lookup
                following.append((f.related_model, lookup))
        frontier = following
    return None


def victim_state(victim: TenantData) -> dict[str, Any]:
    """Every row with a path to the victim's tenant, and its ClickHouse records."""
    state: dict[str, Any] = {}
    for model in apps.get_models():
        path = _tenant_path(model)
        if path is None:
            continue
        rows = model._default_manager.filter(**{path: victim.tenant.pk}).distinct().order_by("pk").values()
        state[model._meta.label] = [orjson.loads(orjson.dumps(r, default=str)) for r in rows]
    [(count, tokens)] = query.select(
        f"SELECT count(), sum(tokens_in) FROM {query.RECORDS} WHERE tenant = {{t:String}}",
        {"t": victim.tenant.code},
    )
    state["clickhouse.usage_records"] = (int(count), int(tokens))
    return state


def _diff(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [key for key in before.keys() | after.keys() if before.get(key) != after.get(key)]


# --- the sweep ---------------------------------------------------------------------------------------


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)

    def add(self, route: Route, who: str, method: str, url: str, problem: str) -> None:
        self.problems.append(f"{route.name}: {who} {method.upper()} {url} → {problem}")


def _body(response: HttpResponseBase) -> str:
    streaming = getattr(response, "streaming", False)
    raw = b"".join(response.streaming_content) if streaming else response.content  # type: ignore[attr-defined]
    return raw.decode("utf-8", "replace")


def hostile_body(victim: TenantData) -> dict[str, Any]:
    """A body naming the victim's objects under every field name our endpoints use."""
    return {
        "contract": victim.contract.code,
        "tenant": victim.tenant.code,
        "package": victim.package.code,
        "line": victim.free_line.pk,
        "invoice": victim.invoice.pk,
        "dispute": victim.dispute.pk,
        "outcome": victim.outcome.pk,
        "endpoint": victim.webhook.pk,
        "delivery": victim.delivery.pk,
        "report": victim.sla_report.pk,
        "prefix": victim.api_key.prefix,
        "api_key": victim.api_key.prefix,
        "record_id": victim.record_ids[0],
        "records": victim.record_ids[:1],
        "reason": "cross-tenant probe",
        "ref": "probe-1",
        "type": "resolved_ticket",
        "value": "1",
        "url": "https://attacker.example/hook",
        "name": "probe",
        "role": "owner",
        "terms": "monthly",
        "kind": "customer_dependency",
        "agent_id": victim.agent.agent_id,
        "tenants": [victim.tenant.code],
        "contracts": [victim.contract.code],
        "public_key": "A" * 43 + "=",
    }


def hostile_query(victim: TenantData) -> dict[str, str]:
    return {
        "contract": victim.contract.code,
        "tenant": victim.tenant.code,
        "invoice": str(victim.invoice.pk),
        "package": victim.package.code,
    }


def _principals(attacker: TenantData) -> dict[str, Client]:
    clients = {f"{role} (session)": attacker.client(role) for role in ROLES}
    clients |= {f"{role} (token)": attacker.client(role, token=True) for role in ROLES}
    clients["anonymous"] = Client()
    for client in clients.values():
        client.raise_request_exception = False  # a 500 is a finding to list, not the end of the sweep
    return clients


def _admin_kwargs(route: Route, victim: TenantData) -> dict[str, Any]:
    """Admin URLs: the victim's object of that model admin where it has one, its tenant's pk otherwise."""
    names = route.parameters
    admin = getattr(route.pattern.callback, "model_admin", None)
    pk: Any = victim.tenant.pk
    if admin is not None:
        path = _tenant_path(admin.model)
        row = admin.model._default_manager.filter(**{path: victim.tenant.pk}).first() if path else None
        pk = row.pk if row is not None else pk
    filled: dict[str, Any] = {}
    for name in names:
        filled[name] = {"app_label": admin.model._meta.app_label if admin else "accounts"}.get(name, pk)
    if "content_type_id" in filled:
        filled["object_id"] = pk
    return filled


def _check_answer(
    findings: Findings,
    route: Route,
    who: str,
    method: str,
    url: str,
    sent: str,
    response: HttpResponseBase,
    markers: list[str],
    aimed_at_victim: bool,
) -> None:
    status = response.status_code
    text = _body(response)
    if status >= 500:
        findings.add(route, who, method, url, f"{status} server error: {text[:200]}")
    leaked = [m for m in markers if m in text and m not in sent]
    if leaked:
        findings.add(route, who, method, url, f"{status} answer holds the other tenant's {leaked[:3]}")
    if aimed_at_victim and 200 <= status < 300:
        findings.add(route, who, method, url, f"{status}: reached the other tenant's object")
    if who == "anonymous" and route.name not in PUBLIC:
        location = response.get("Location", "") if 300 <= status < 400 else ""
        if status not in (401, 403, 404, 405) and "login" not in location:
            findings.add(route, who, method, url, f"{status} to an anonymous caller")


@pytest.fixture
def tenants() -> tuple[TenantData, TenantData]:
    return build_tenant("alpha"), build_tenant("bravo")


def release_code(data: TenantData) -> str:
    """The code of the tenant's release plan."""
    return data.release.code


def _staff_only_admin(route: Route) -> bool:
    return route.namespace == ADMIN_NAMESPACE and route.name not in PUBLIC


def test_every_url_pattern_is_filled_or_public() -> None:
    """A new endpoint must say how it is aimed at another tenant's objects (or why it is public)."""
    routes = all_routes()
    unknown = sorted(
        r.name for r in routes if not _staff_only_admin(r) and r.name not in FILLERS and r.name not in PUBLIC
    )
    assert unknown == [], f"add these patterns to FILLERS or PUBLIC in {__name__}: {unknown}"
    stale = sorted((FILLERS.keys() | PUBLIC.keys()) - {r.name for r in routes})
    assert stale == [], f"these patterns are gone: remove them from FILLERS/PUBLIC: {stale}"


def test_no_tenant_reads_or_writes_another_tenants_data(tenants: tuple[TenantData, TenantData]) -> None:
    attacker, victim = tenants
    markers = [m for m in victim.markers() if m]
    assert not any(m in "".join(attacker.markers()) for m in markers), "the tenants' identifiers overlap"
    owner = victim.client(Role.OWNER)
    owner.raise_request_exception = False
    staff = Client(raise_request_exception=False)
    staff.force_login(User.objects.create_user("isolation-staff", password="pw", is_staff=True))
    principals = _principals(attacker)
    findings = Findings()
    swept = 0
    initial = victim_state(victim)

    for route in all_routes():
        admin = _staff_only_admin(route)
        if not admin and route.name not in FILLERS and route.name not in PUBLIC:
            continue  # test_every_url_pattern_is_filled_or_public names it
        fill = Fill() if admin else FILLERS.get(route.name, Fill())
        kwargs = _admin_kwargs(route, victim) if admin else fill.kwargs(victim)
        url = _admin_url(route, kwargs) if admin else route.url(kwargs)
        if kwargs and not admin:
            unreachable = _filler_misses(url + _query_string(fill.query(victim)), owner, staff)
            if unreachable:
                findings.add(route, "the victim's owner and staff", "get", url, unreachable)
        aimed = bool(kwargs) and not fill.shared and not admin
        before = victim_state(victim) if not admin else None
        for who, client in principals.items():
            if admin and who not in ADMIN_PRINCIPALS:
                continue
            for method in ADMIN_METHODS if admin else METHODS:
                cache.clear()  # throttling counters: a sweep is not a flood
                target, sent = _request_target(url, method, fill, victim)
                response = _send(client, method, target, sent)
                swept += 1
                if admin:
                    if response.status_code != 302 or "login" not in response.get("Location", ""):
                        findings.add(route, who, method, target, f"{response.status_code}: admin not refused")
                    continue
                _check_answer(findings, route, who, method, target, target + sent, response, markers, aimed)
        changed = _diff(before, victim_state(victim)) if before is not None else []
        if changed:
            findings.add(route, "someone", "any", url, f"changed the other tenant's {sorted(changed)}")
    if not findings.problems and _diff(initial, victim_state(victim)):
        findings.problems.append(f"the admin sweep changed {_diff(initial, victim_state(victim))}")

    assert swept > 2000, swept
    assert findings.problems == [], "\n".join(findings.problems)


def _filler_misses(url: str, owner: Client, staff: Client) -> str:
    """The victim's owner (or staff, for staff-only views) reads the filled URL: the object is real.
    Empty when one of them can; otherwise what they got (a filler that names nothing proves nothing)."""
    answers = []
    for client in (owner, staff):
        cache.clear()
        response = client.get(url)
        if response.status_code in (200, 405):
            return ""
        answers.append(f"{response.status_code} {_body(response)[:200]}")
    return f"the filled URL reaches no object: {answers}"


def _admin_url(route: Route, kwargs: dict[str, Any]) -> str:
    """Named admin views by name; the admin's unnamed catch-all by a path only it matches."""
    if route.pattern.name is None:
        return "/admin/no-such-page/"
    return route.url(kwargs)


def _query_string(params: dict[str, str]) -> str:
    return "?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else ""


def _request_target(url: str, method: str, fill: Fill, victim: TenantData) -> tuple[str, str]:
    """The URL (with a query naming the victim) and, for writes, the JSON body naming the victim."""
    params = hostile_query(victim) | fill.query(victim)
    if method == "get":
        return url + _query_string(params), ""
    body = hostile_body(victim) | (fill.body(victim) if fill.body else {})
    return url + _query_string(fill.query(victim)), orjson.dumps(body).decode()


def _send(client: Client, method: str, url: str, body: str) -> HttpResponseBase:
    """JSON to the API; the portal's forms get the same fields form-encoded."""
    if method == "get":
        return client.get(url)
    if url.startswith("/v1/") or method != "post":
        return getattr(client, method)(url, data=body, content_type="application/json")
    return client.post(url, data=orjson.loads(body))
