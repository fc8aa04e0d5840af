"""Every model text column that a public REST endpoint writes from request input: a value one past the
column's max_length, sent through the public API, answers a 4xx with a code and writes nothing (never a
500 from the database); a value at the limit never answers a 5xx; a control character in it is refused.

The columns come from the models themselves (`input_columns`): a new CharField on a model fails
`test_every_text_column_is_written_here_or_said_not_to_be` until it is either given a writer below or
named in NOT_FROM_REST with the reason. The limits are read from the model fields at run time, so a
column made wider or narrower is tested at its new size.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import orjson
import pytest
from django.apps import apps
from django.db import models
from django.test import Client
from django.utils import timezone

from agents.services import register_agent
from billing.outcomes import declare_outcome
from contracts.models import Contract
from entitlements.leases import period_of
from entitlements.services import issue_api_key
from tests.api.conftest import member_client, staff_client, token_client
from tests.factories import ContractFactory
from treemeter_records import new_record_id, private_key_from_seed, protocol, public_key_to_b64
from webhooks.models import WebhookEndpoint

pytestmark = pytest.mark.django_db

PROJECT_APPS = {
    "accounts", "catalog", "contracts", "agents", "ingest", "billing", "sla", "entitlements", "ledger",
    "webhooks", "idempotency", "scheduling", "releases",
}  # fmt: skip


@dataclass
class World:
    contract: Contract
    owner: Client
    member: Client
    staff: Client
    agent_key: Any
    agent_id: str
    router_key: Any
    router_id: str
    key_hash: str
    outcome_id: int
    endpoint_id: int


@pytest.fixture
def world() -> World:
    contract = ContractFactory.create(code="limits-main")
    key = private_key_from_seed(os.urandom(32))
    register_agent(
        agent_id="limits-agent",
        public_key_b64=public_key_to_b64(key),
        tenant_codes=[],
        contract_codes=[contract.code],
    )
    router_key = private_key_from_seed(os.urandom(32))
    register_agent(
        agent_id="limits-router", public_key_b64=public_key_to_b64(router_key), tenant_codes=[], kind="router"
    )
    api_key = issue_api_key(contract_code=contract.code, quota_tokens=10_000).api_key
    outcome = declare_outcome(contract, "limits-outcome", "resolved_ticket", Decimal(1), timezone.now())
    endpoint = WebhookEndpoint.objects.create(tenant=contract.tenant, url="https://hooks.limits.test/h")
    return World(
        contract=contract,
        owner=token_client(contract.tenant),
        member=member_client(contract.tenant),
        staff=staff_client(),
        agent_key=key,
        agent_id="limits-agent",
        router_key=router_key,
        router_id="limits-router",
        key_hash=api_key.key_hash,
        outcome_id=outcome.pk,
        endpoint_id=endpoint.pk,
    )


@dataclass(frozen=True)
class Writer:
    """An endpoint that stores request input: how to call it validly, and where each input lands.

    `inputs` maps an input to the column it is stored in ("app.Model.field"); an input is a body field,
    `path:<name>` (a URL parameter, `{name}` in `path`) or `header:<name>`. With `item`, a body field is
    one of the first object of the body's list `item` (``{"events": [{...}]}``)."""

    method: str
    path: str
    # owner (an owner's API token), member (an owner's session), staff (a staff session), agent (signed
    # by an executor) or router (signed by an L1 router)
    caller: str
    body: Callable[[World], Any]  # an object, or a list of objects (its first is filled)
    inputs: dict[str, str]
    path_values: dict[str, str] = field(default_factory=dict)
    item: str = ""

    def send(self, world: World, overrides: dict[str, str]) -> Any:
        body = self.body(world)
        fields = body[self.item][0] if self.item else body[0] if isinstance(body, list) else body
        values = {**self.path_values}
        headers: dict[str, str] = {}
        for name, value in overrides.items():
            kind, _, bare = name.rpartition(":")
            if kind == "path":
                values[bare] = value
            elif kind == "header":
                headers[bare] = value
            else:
                fields[name] = value
        path = self.path.format(
            **values, outcome=world.outcome_id, endpoint=world.endpoint_id, contract=world.contract.code
        )
        raw = orjson.dumps(body)
        callers = {
            "owner": world.owner, "member": world.member, "staff": world.staff, "agent": Client(),
            "router": Client(),
        }  # fmt: skip
        client = callers[self.caller]
        signers = {"agent": (world.agent_key, world.agent_id), "router": (world.router_key, world.router_id)}
        if self.caller in signers:
            key, agent_id = signers[self.caller]
            headers |= protocol.signed_headers(key, agent_id, self.method.upper(), path, raw)
        client.raise_request_exception = False
        return client.generic(
            self.method.upper(), path, raw, content_type="application/json", headers=headers
        )


WRITERS = [
    Writer(
        "post", "/v1/releases", "staff",
        lambda w: {"code": "limits-plan", "name": "n", "contract": w.contract.code,
                   "stages": [{"name": "s", "capabilities": []}]},
        {"code": "releases.ReleasePlan.code", "name": "releases.ReleasePlan.name"},
    ),
    Writer(
        "post", "/v1/releases", "staff",
        lambda w: {"code": "limits-plan-2", "name": "n", "contract": w.contract.code,
                   "stages": [{"name": "s", "capabilities": []}]},
        {"name": "releases.ReleaseStage.name"}, item="stages",
    ),
    Writer(
        "post", "/v1/tokens", "member", lambda w: {"name": "t", "role": "read_only"},
        {"name": "accounts.ApiToken.name"},
    ),
    Writer(
        "post", "/v1/keys", "owner", lambda w: {"contract": w.contract.code, "sla_class": "gold"},
        {"name": "entitlements.ApiKey.name", "sla_class": "entitlements.ApiKey.sla_class",
         "header:Idempotency-Key": "idempotency.IdempotencyKey.key"},
    ),
    Writer(
        "post", "/v1/api-keys", "staff", lambda w: {"contract": w.contract.code, "sla_class": "gold"},
        {"name": "entitlements.ApiKey.name", "sla_class": "entitlements.ApiKey.sla_class"},
    ),
    Writer(
        "post", "/v1/agents", "staff",
        lambda w: {
            "agent_id": "new-agent", "public_key": public_key_to_b64(private_key_from_seed(os.urandom(32))),
            "contracts": [w.contract.code], "host_class": "cpu",
        },
        {"agent_id": "agents.Agent.agent_id", "public_key": "agents.AgentKey.public_key",
         "host_class": "agents.Agent.host_class"},
    ),
    Writer(
        "post", "/v1/models/publisher-keys", "staff",
        lambda w: {
            "model_id": "limits-model",
            "public_key": public_key_to_b64(private_key_from_seed(os.urandom(32))),
        },
        {"model_id": "agents.ModelPublisherKey.model_id",
         "public_key": "agents.ModelPublisherKey.public_key"},
    ),
    Writer(
        "post", protocol.MANIFEST_REFUSALS_PATH, "agent",
        lambda w: {
            "model_id": "limits-model", "reason": "unknown_key", "key_id": "ed25519:0123456789abcdef",
            "manifest_sha3": "ab" * 32, "refused_ns": time.time_ns(),
        },
        {"model_id": "agents.ManifestRefusal.model_id", "key_id": "agents.ManifestRefusal.key_id",
         "manifest_sha3": "agents.ManifestRefusal.manifest_sha3"},
    ),
    Writer(
        "put", "/v1/contracts/{contract}/metrics/{metric}", "staff",
        lambda w: {"name": "Weighted", "expression": "distinct_experts * hops"},
        {"path:metric": "contracts.ContractMetric.code", "name": "contracts.ContractMetric.name"},
        path_values={"metric": "weighted"},
    ),
    Writer(
        "put", "/v1/contracts/{contract}/charges/{dimension}", "staff", lambda w: {"unit_price": "0.1"},
        {"path:dimension": "contracts.ContractPrice.dimension"},
        path_values={"dimension": "requests"},
    ),
    Writer(
        "post", "/v1/contracts/{contract}/credits", "staff",
        lambda w: {"amount": "10.00", "currency": "CNY", "reference": "grant-1"},
        {"reference": "billing.CreditEntry.reference"},
    ),
    Writer(
        "post", "/v1/outcomes", "owner",
        lambda w: {"contract": w.contract.code, "ref": "case-2", "type": "matched_patient", "value": "1.00"},
        {"ref": "billing.Outcome.ref", "type": "billing.Outcome.kind"},
    ),
    Writer(
        "post", "/v1/outcomes/{outcome}/revoke", "owner", lambda w: {"reason": "wrong"},
        {"reason": "billing.Outcome.reason"},
    ),
    Writer(
        "post", "/v1/webhooks/endpoints", "owner", lambda w: {"url": "https://hooks.limits.test/new"},
        {"url": "webhooks.WebhookEndpoint.url"},
    ),
    Writer(
        "patch", "/v1/webhooks/endpoints/{endpoint}", "owner", lambda w: {"url": "https://hooks.limits.test/p"},
        {"url": "webhooks.WebhookEndpoint.url"},
    ),
    Writer(
        "put", "/v1/contracts/{contract}/taxes", "staff",
        lambda w: [{"code": "vat", "name": "VAT", "rate": "0.06"}],
        {"code": "contracts.ContractTax.code", "name": "contracts.ContractTax.name"},
    ),
    Writer(
        "put", "/v1/sla/dependencies/{contract}", "staff",
        lambda w: {"name": "HIS", "health_url": "https://his.limits.test/health"},
        {"name": "sla.CustomerDependency.name", "health_url": "sla.CustomerDependency.health_url"},
    ),
    Writer(
        "post", protocol.LEASES_PATH, "agent",
        lambda w: {
            "key_hash": w.key_hash, "period": period_of(timezone.now()), "tokens": 10, "min_tokens": 1,
            "request_id": "lease-request-1",
        },
        {"period": "entitlements.QuotaPeriod.period", "request_id": "entitlements.QuotaLease.request_id"},
    ),
    Writer(
        "post", protocol.SCHEDULER_EVENTS_PATH, "router",
        lambda w: {"events": [{
            "id": new_record_id(), "kind": "borrow", "at_ns": time.time_ns(), "subtree": "finance",
            "executor": "b-1", "lender": "batch", "reason": "load above 90%", "figures": {"load": 0.95},
        }]},
        {"subtree": "scheduling.SchedulerEvent.subtree", "executor": "scheduling.SchedulerEvent.executor",
         "lender": "scheduling.SchedulerEvent.lender", "reason": "scheduling.SchedulerEvent.reason"},
        item="events",
    ),
]  # fmt: skip

# Text columns no public REST endpoint writes from request input, and why.
LITELLM_IMPORT = (
    "written by the LiteLLM price-file import, whose parser refuses longer values (test_price_catalogue.py)"
)
FACTORY = (
    "the admin, or the package factory's multipart upload (tests/package_factory/test_factory_api.py: at and "
    "past the limit, control characters)"
)
NOT_FROM_REST = {
    "accounts.Tenant.code": "tenants are made by staff in the admin",
    "accounts.Tenant.name": "tenants are made by staff in the admin",
    "accounts.ApiToken.prefix": "made by the platform",
    "accounts.ApiToken.digest": "made by the platform",
    "catalog.ComputePackage.code": FACTORY,
    "catalog.ComputePackage.name": FACTORY,
    "catalog.ComputePackage.unit": FACTORY,
    "catalog.Capability.code": FACTORY,
    "catalog.Capability.name": FACTORY,
    "catalog.Capability.model_id": "made by the package factory from the capability's code",
    "catalog.OnnxArtifact.sha256": "the uploaded file's digest, made by the platform",
    "catalog.HostCostProfile.host_class": "the catalogue is kept in the admin",
    "catalog.PackagePlan.code": "the catalogue is kept in the admin",
    "catalog.PackagePlan.name": "the catalogue is kept in the admin",
    "catalog.PlanPrice.dimension": "the catalogue is kept in the admin",
    "catalog.ModelPrice.model_id": LITELLM_IMPORT,
    "catalog.ModelPrice.provider": LITELLM_IMPORT,
    "catalog.ModelPrice.mode": LITELLM_IMPORT,
    "accounts.Tenant.legal_name": "a tenant's legal details are set in the admin",
    "accounts.Tenant.tax_id": "a tenant's legal details are set in the admin",
    "accounts.Tenant.bank_name": "a tenant's legal details are set in the admin",
    "accounts.Tenant.bank_account": "a tenant's legal details are set in the admin",
    "billing.Issuer.code": "issuers are set in the admin",
    "billing.Issuer.legal_name": "issuers are set in the admin",
    "billing.Issuer.tax_id": "issuers are set in the admin",
    "contracts.Contract.code": "made by the platform on purchase, or by staff in the admin",
    "contracts.Contract.checkout_session_id": "from Stripe",
    "contracts.Contract.issuing_entity": "set in the admin (not a PATCH term)",
    "agents.Agent.name": "set in the admin",
    "agents.AgentKey.key_id": "derived from the public key",
    "agents.ModelPublisherKey.key_id": "derived from the public key",
    "billing.Invoice.currency": "the contract's",
    "billing.Invoice.issuing_entity": "the contract's",
    "billing.Invoice.number": "made by the platform",
    "billing.InvoiceLine.dimension": "the invoice run's",
    "billing.InvoiceLine.description": "the invoice run's",
    "billing.InvoiceSequence.issuing_entity": "the invoice run's",
    "billing.Coupon.code": "kept in the admin",
    "billing.Note.number": "made by the platform",
    "billing.Note.reason": "made by the platform (a dispute's note; see the report on issue 13)",
    "billing.LateUsage.dimension": "the invoice run's",
    "billing.StripeCustomer.customer_id": "from Stripe",
    "billing.StripePayment.payment_intent_id": "from Stripe",
    "billing.StripePayment.checkout_session_id": "from Stripe (the Checkout Session the portal's Pay opens)",
    "billing.StripePayment.superseded_intent_id": "from Stripe (the pushed intent a paid session cancels)",
    "billing.StripeNote.stripe_id": "from Stripe",
    "billing.StripeEvent.event_id": "from Stripe's signed webhook",
    "billing.StripeEvent.event_type": "from Stripe's signed webhook",
    "sla.SlaPolicy.name": "SLA policies are kept in the admin or imported as OpenSLO",
    "sla.SlaPolicy.time_zone": "SLA policies are kept in the admin or imported as OpenSLO",
    "sla.Objective.name": "SLA policies are kept in the admin or imported as OpenSLO",
    "sla.SlaReport.month": "computed",
    "sla.SlaReport.time_zone": "computed",
    "sla.SlaReport.ledger_checkpoint": "computed",
    "sla.ServiceCredit.month": "computed",
    "sla.ServiceCredit.currency": "computed",
    "sla.ServiceCredit.description": "computed",
    "sla.ServiceCredit.held_reason": "computed",
    "sla.DependencyCheck.error": "computed: what the dependency watch's probe met",
    "sla.SlaAlert.rule": "computed",
    "sla.SlaAlert.subject": "computed",
    "entitlements.ApiKey.prefix": "made by the platform",
    "entitlements.ApiKey.key_hash": "made by the platform",
    "ledger.LogBatch.body_sha256": "computed at ingest",
    "ledger.LogLeaf.tenant": "ingest (the record format's limits: tests/ingest)",
    "ledger.LogLeaf.contract": "ingest (the record format's limits: tests/ingest)",
    "billing.DisputeEvent.action": "made by the platform",
    "billing.BillingExclusion.tenant": "the dispute's invoice",
    "billing.BillingExclusion.contract": "the dispute's invoice",
    "webhooks.WebhookEndpoint.secret": "made by the platform",
    "webhooks.WebhookEvent.event_id": "made by the platform",
    "webhooks.WebhookEvent.type": "made by the platform",
    "idempotency.IdempotencyKey.scope": "made by the platform",
    "idempotency.IdempotencyKey.fingerprint": "made by the platform",
    "idempotency.IdempotencyKey.content_type": "the answer's",
}
# Free text, not identifiers: control characters are not refused there (only NUL, by DRF).
FREE_TEXT = {"billing.Outcome.reason", "scheduling.SchedulerEvent.reason"}
# The ingest path (POST /v1/ingest/batches) writes these from signed records: its own tests walk them.
INGEST_APP = "ingest"


def input_columns() -> dict[str, models.CharField]:
    """Every bounded text column without fixed choices of the project's models, by "app.Model.field"."""
    columns = {}
    for model in apps.get_models():
        if model._meta.app_label not in PROJECT_APPS or model._meta.app_label == INGEST_APP:
            continue
        for column in model._meta.get_fields():
            if isinstance(column, models.CharField) and column.max_length and not column.choices:
                columns[f"{model._meta.label}.{column.name}"] = column
    return columns


def limit_of(label: str) -> int:
    limit = input_columns()[label].max_length
    assert limit is not None
    return limit


def value_of_length(label: str, length: int) -> str:
    if label == "webhooks.WebhookEndpoint.url":
        prefix = "https://hooks.limits.test/"
        return prefix + "a" * (length - len(prefix))
    return "a" * length


def rows(label: str) -> int:
    return input_columns()[label].model._default_manager.count()


CASES = [(w, name) for w in WRITERS for name in w.inputs]
IDS = [f"{w.method} {w.path} {name}" for w, name in CASES]


def test_every_text_column_is_written_here_or_said_not_to_be() -> None:
    written = {label for w in WRITERS for label in w.inputs.values()}
    assert written <= set(input_columns()), written - set(input_columns())
    unclassified = set(input_columns()) - written - set(NOT_FROM_REST)
    assert unclassified == set(), f"add a Writer or a NOT_FROM_REST reason for {sorted(unclassified)}"
    assert not written & set(NOT_FROM_REST)
    assert set(NOT_FROM_REST) <= set(input_columns()), "stale NOT_FROM_REST entries"


@pytest.mark.parametrize(("writer", "name"), CASES, ids=IDS)
def test_the_writers_base_request_is_valid(world: World, writer: Writer, name: str) -> None:
    """So that a refusal below is the one value's, not the rest of the request's."""
    response = writer.send(world, {})
    assert 200 <= response.status_code < 300, response.content


@pytest.mark.parametrize(("writer", "name"), CASES, ids=IDS)
def test_one_past_a_columns_limit_is_a_4xx_with_a_code(world: World, writer: Writer, name: str) -> None:
    label = writer.inputs[name]
    limit = limit_of(label)
    before = rows(label)
    response = writer.send(world, {name: value_of_length(label, limit + 1)})
    assert 400 <= response.status_code < 500, (label, limit, response.status_code, response.content[:300])
    body = response.json()
    assert isinstance(body["code"], str) and body["code"] and set(body) == {"code", "message", "details"}
    assert rows(label) == before, f"{label}: a refused request wrote a row"
    # Refused by the request's own validation, before the database had to (common.errors' DataError net).
    assert body["details"] != {"errors": ["A value is out of range for its field."]}, label


@pytest.mark.parametrize(("writer", "name"), CASES, ids=IDS)
def test_a_value_at_the_limit_is_never_a_5xx(world: World, writer: Writer, name: str) -> None:
    label = writer.inputs[name]
    response = writer.send(world, {name: value_of_length(label, limit_of(label))})
    assert response.status_code < 500, response.content[:300]
    # Whatever else may be wrong with it, its length is not: the request's limit is the column's.
    answer = response.json()
    details = answer.get("details", {}) if isinstance(answer, dict) else {}  # a list: stored as sent
    assert "no more than" not in str(details.get(name.rpartition(":")[2], ""))


IDENTIFIER_CASES = [(w, name) for w, name in CASES if w.inputs[name] not in FREE_TEXT]


@pytest.mark.parametrize(
    ("writer", "name"), IDENTIFIER_CASES, ids=[f"{w.method} {w.path} {n}" for w, n in IDENTIFIER_CASES]
)
def test_a_control_character_in_an_identifier_is_refused(world: World, writer: Writer, name: str) -> None:
    label = writer.inputs[name]
    before = rows(label)
    response = writer.send(world, {name: value_of_length(label, 12)[:-2] + "\x01x"})
    assert 400 <= response.status_code < 500, (label, response.content[:300])
    assert response.json()["code"]
    assert rows(label) == before
