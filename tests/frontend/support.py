"""Helpers for the portal tests: signed-in members, and a contract with real usage and an invoice."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from django.contrib.auth.models import User
from django.test import Client

from accounts.models import Role, Tenant
from billing.models import Invoice
from billing.services import finalize_invoice, generate_invoice
from common.periods import month_bounds
from contracts.models import Contract
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.factories import ContractFactory, ContractPriceFactory, MembershipFactory, signing_agent


def signed_in(user: User, language: str = "en") -> Client:
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = language
    return client


def member(tenant: Tenant, role: str = Role.OWNER, language: str = "en") -> Client:
    """A test client signed in as a new member of `tenant` in `role`, speaking `language`."""
    return signed_in(MembershipFactory.create(tenant=tenant, role=role).user, language)


def priced_contract(**kwargs: object) -> Contract:
    """A CNY contract: 0.05 per request with 10 requests included, 0.0002 per input token."""
    contract = ContractFactory.create(**kwargs)
    ContractPriceFactory.create(
        contract=contract, dimension="requests", unit_price=Decimal("0.05"), included_quantity=Decimal(10)
    )
    ContractPriceFactory.create(contract=contract, dimension="tokens_in", unit_price=Decimal("0.0002"))
    return contract


def ingest(contract: Contract, count: int, start: datetime, agent_id: str = "agent-1") -> None:
    """`count` signed records of `contract` starting at `start`, through POST /v1/ingest/batches."""
    agent = signing_agent(contract, agent_id=agent_id)
    start_ns = int(start.timestamp()) * 10**9
    records = [agent.record(contract, start_ns=start_ns + i * 10**9) for i in range(count)]
    response = Client().post(
        "/v1/ingest/batches", data=agent.batch(records).body(), content_type="application/x-ndjson"
    )
    assert response.status_code == 200, response.content


def november_invoice(contract: Contract, records: int = 4) -> Invoice:
    """A finalised November 2026 invoice over `records` ingested requests, with a ledger checkpoint."""
    ingest(contract, records, datetime(2026, 11, 15, tzinfo=UTC), agent_id=f"agent-{contract.code}")
    invoice = finalize_invoice(generate_invoice(contract.pk, *month_bounds("2026-11")))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    return invoice
