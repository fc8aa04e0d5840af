"""A tenant with a complete data set, made through the real services (and the real ingest path).

Shared by the tenant-isolation test, the schemathesis run and the browser tests: a contract with prices
and an SLA policy, usage records ingested as signed batches (so they are in ClickHouse and in the log),
a finalised invoice with lines, a credit note, a dispute, an outcome, a customer inference API key, an
API token per role, a webhook endpoint with an event, a delivery and an attempt, and an SLA report.
Every identifier a tenant owns carries its `label`, so a leak is a plain substring search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from accounts.access import Principal
from accounts.models import ApiToken, Membership, Role, Tenant
from accounts.services import issue_api_token
from billing.disputes import open_dispute
from billing.models import Dispute, Invoice, InvoiceLine, Note, Outcome
from billing.outcomes import declare_outcome
from billing.services import finalize_invoice, generate_invoice
from billing.settlement import issue_note
from catalog.models import ComputePackage, HostCostProfile
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from entitlements.models import ApiKey
from entitlements.services import issue_api_key
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from package_factory.models import PackageBuild
from package_factory.services import build_package
from releases.models import ReleasePlan
from releases.services import PlanSpec, StageSpec, create_plan
from sandbox.models import Sandbox
from sandbox.services import open_sandbox
from sla.models import (
    CreditStep,
    CustomerDependency,
    DependencyCheck,
    Exclusion,
    Objective,
    SlaPolicy,
    SlaReport,
)
from sla.services import compute_report
from tests.factories import SigningAgent, signing_agent
from tests.package_factory.onnx_models import LINEAR_INPUTS, LINEAR_OUTPUTS, linear_model
from webhooks.models import WebhookDelivery, WebhookDeliveryAttempt, WebhookEndpoint, WebhookEvent

PASSWORD = "pw-isolation-1"
MONTH = "2026-11"
RECORDS = 6
ROLES: tuple[str, ...] = (Role.OWNER, Role.BILLING, Role.DEVELOPER, Role.READ_ONLY)


@dataclass
class TenantData:
    label: str
    tenant: Tenant
    package: ComputePackage
    contract: Contract
    agent: SigningAgent
    record_ids: list[str]
    invoice: Invoice
    line: InvoiceLine  # disputed
    free_line: InvoiceLine  # not disputed
    credit_note: Note
    dispute: Dispute
    outcome: Outcome
    api_key: ApiKey
    api_key_secret: str
    webhook: WebhookEndpoint
    event: WebhookEvent
    delivery: WebhookDelivery
    sla_report: SlaReport
    dependency: CustomerDependency
    outage: Exclusion
    built: PackageBuild  # the tenant's own package, from its package factory
    sandbox: Sandbox  # on its own package
    release: ReleasePlan  # a gray release of its contract's package, its first stage in force
    receipt: str  # of a logged record
    missing_receipts: list[str]  # of two records served and never shipped (disputable)
    users: dict[str, User] = field(default_factory=dict)  # role → a signed-in member in that role
    tokens: dict[str, str] = field(default_factory=dict)  # role → API token secret
    token_rows: dict[str, ApiToken] = field(default_factory=dict)

    def markers(self) -> list[str]:
        """Strings only this tenant's answers may hold: its codes, numbers, references and secrets."""
        return [
            self.tenant.code,
            self.contract.code,
            self.invoice.number or "",
            self.credit_note.number,
            self.dispute.reason,
            self.outcome.ref,
            self.api_key.prefix,
            self.webhook.url,
            self.webhook.secret,
            self.event.event_id,
            self.dependency.name,
            self.dependency.health_url,
            self.built.package.code,
            self.built.capability.artifact_id or "",
            self.sandbox.contract.code,
            self.release.code,
            *self.sandbox.simulator_keys.values(),
            *self.record_ids,
            *(token.prefix for token in self.token_rows.values()),
            *(user.username for user in self.users.values()),
        ]

    def client(self, role: str, *, token: bool = False) -> Client:
        """A test client acting for this tenant in `role`: signed in (session) or with its API token."""
        if token:
            return Client(HTTP_AUTHORIZATION=f"Bearer {self.tokens[role]}")
        client = Client()
        client.force_login(self.users[role])
        return client


def build_tenant(label: str, *, records: int = RECORDS) -> TenantData:
    """One tenant's complete data set. `label` is a short slug (e.g. "alpha") unique in the database."""
    tenant = Tenant.objects.create(code=f"{label}-co", name=f"{label.title()} Co")
    package = ComputePackage.objects.create(code=f"{label}-pkg", name=f"{label.title()} package")
    contract = Contract.objects.create(
        code=f"{label}-contract",
        tenant=tenant,
        package=package,
        currency="CNY",
        starts_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    for dimension, price in (("requests", "0.05"), ("tokens_in", "0.0002"), ("l3_seconds", "0.80")):
        ContractPrice.objects.create(contract=contract, dimension=dimension, unit_price=Decimal(price))
    _sla_policy(contract)

    agent = signing_agent(contract, agent_id=f"agent-{label}")
    start = int(datetime(2026, 11, 15, tzinfo=UTC).timestamp()) * 10**9
    batch = [
        agent.record(contract, start_ns=start + i * 10**9, client_request_id=f"{label}-req-{i}")
        for i in range(records)
    ]
    never_shipped = [agent.record(contract, start_ns=start + (records + i) * 10**9) for i in range(2)]
    answer = Client().post(
        "/v1/ingest/batches", data=agent.batch(batch).body(), content_type="application/x-ndjson"
    )
    assert answer.status_code == 200, answer.content

    users = {role: _member(tenant, f"{label}-{role}", role) for role in ROLES}
    owner = Principal(tenant=tenant, role=Role.OWNER, user_id=users[Role.OWNER].pk)
    issued = {role: issue_api_token(owner, role=role, name=f"{label} {role} token") for role in ROLES}

    invoice = finalize_invoice(generate_invoice(contract.pk, *month_bounds(MONTH)))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    line = invoice.lines.get(dimension="requests")
    credit_note = issue_note(
        invoice, "credit", Decimal("0.01"), f"{label} goodwill", line=invoice.lines.first()
    )
    dispute = open_dispute(
        users[Role.OWNER],
        line.pk,
        f"{label} disputes the request count",
        Principal(tenant, Role.OWNER, users[Role.OWNER].pk),
    )
    outcome = declare_outcome(contract, f"{label}-outcome-1", "resolved_ticket", Decimal("1"), timezone.now())
    key = issue_api_key(contract_code=contract.code, sla_class="standard", name=f"{label} key")
    webhook, event, delivery = _webhook(tenant, label)
    dependency, outage = _dependency(contract, label)
    report = compute_report(contract, MONTH, now=datetime(2026, 12, 2, tzinfo=UTC))
    built = _built_package(owner, label)
    sandbox = open_sandbox(owner, [built.package.code])
    release = create_plan(
        spec=PlanSpec(f"{contract.code}-release", "Launch", contract.code, stages=[StageSpec("Day 1", [])]),
        now=timezone.now(),
    )

    return TenantData(
        label=label,
        tenant=tenant,
        package=package,
        contract=contract,
        agent=agent,
        record_ids=[str(r["record_id"]) for r in batch],
        invoice=invoice,
        line=line,
        free_line=invoice.lines.get(dimension="tokens_in"),
        credit_note=credit_note,
        dispute=dispute,
        outcome=outcome,
        api_key=key.api_key,
        api_key_secret=key.secret,
        webhook=webhook,
        event=event,
        delivery=delivery,
        sla_report=report,
        dependency=dependency,
        outage=outage,
        built=built,
        sandbox=sandbox,
        release=release,
        receipt=agent.receipt(batch[0]),
        missing_receipts=[agent.receipt(r) for r in never_shipped],
        users=users,
        tokens={role: token.secret for role, token in issued.items()},
        token_rows={role: token.token for role, token in issued.items()},
    )


def _built_package(owner: Principal, label: str) -> PackageBuild:
    """A package of the tenant's own, built by the package factory from a model only it uploaded."""
    HostCostProfile.objects.get_or_create(
        host_class="tenant-data-cpu",
        defaults={
            "currency": "CNY",
            "depreciation_per_hour": Decimal(2),
            "power_per_hour": Decimal(0),
            "operations_per_hour": Decimal(1),
        },
    )
    declaration = {
        "package": {"code": f"{label}-built", "name": f"{label.title()} built package"},
        "capability": {"code": f"{label}-built-scorer", "inputs": LINEAR_INPUTS, "outputs": LINEAR_OUTPUTS},
        "prices": {"events_per_month": 1000},
        "host_class": "tenant-data-cpu",
    }
    model = linear_model(graph_name=f"{label}-scorer")
    return build_package(owner, declaration, model, template_code="contract-review")


def _dependency(contract: Contract, label: str) -> tuple[CustomerDependency, Exclusion]:
    """A watched dependency (on a closed loopback port) with one failed check and one outage it opened,
    on a day without records."""
    dependency = CustomerDependency.objects.create(
        contract=contract, name=f"{label} HIS", health_url=f"http://127.0.0.1:9/{label}/health"
    )
    began = datetime(2026, 11, 20, 10, 1, tzinfo=UTC)
    DependencyCheck.objects.create(
        dependency=dependency, checked_at=began, healthy=False, error=f"ConnectError: {label} refused"
    )
    outage = Exclusion.objects.create(
        contract=contract,
        kind=Exclusion.Kind.CUSTOMER_DEPENDENCY,
        starts_at=began,
        ends_at=began + timedelta(minutes=8),
        reason=f"{label} HIS failed every check (detected automatically)",
        detected_by=dependency,
    )
    return dependency, outage


def _member(tenant: Tenant, username: str, role: str) -> User:
    user = User.objects.create_user(username=username, password=PASSWORD)
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


def _sla_policy(contract: Contract) -> SlaPolicy:
    policy = SlaPolicy.objects.create(name=f"SLA {contract.code}", contract=contract, time_zone="UTC")
    availability = Objective.objects.create(
        policy=policy, name="availability", kind="availability", target_percent=Decimal("99.9")
    )
    CreditStep.objects.create(
        objective=availability, below_percent=Decimal("99.9"), credit_percent=Decimal(10)
    )
    Objective.objects.create(
        policy=policy,
        name="latency-l3",
        kind="latency",
        layer="l3",
        threshold_ms=Decimal(150),
        target_percent=Decimal(99),
    )
    return policy


def _webhook(tenant: Tenant, label: str) -> tuple[WebhookEndpoint, WebhookEvent, WebhookDelivery]:
    """An endpoint with one event, one failed delivery and its attempt (no HTTP is sent).

    The URL is a closed loopback port (the tests allow private URLs): an event published while a test
    runs (tasks run eagerly, inside the request) fails at once, where a made-up name would wait on DNS
    (once more than the 5 s a browser step waits, on a CI machine)."""
    endpoint = WebhookEndpoint.objects.create(tenant=tenant, url=f"http://127.0.0.1:9/{label}/hooks")
    event = WebhookEvent.objects.create(
        event_id=f"{label}-evt-1", type="invoice.finalized", tenant=tenant, payload={"tenant": tenant.code}
    )
    delivery = WebhookDelivery.objects.create(
        event=event, endpoint=endpoint, status=WebhookDelivery.Status.FAILED
    )
    attempted = timezone.now() - timedelta(minutes=5)
    WebhookDeliveryAttempt.objects.create(
        delivery=delivery,
        number=1,
        attempted_at=attempted,
        status_code=500,
        response_snippet=f"{label} receiver error",
        duration_ms=12,
    )
    return endpoint, event, delivery
