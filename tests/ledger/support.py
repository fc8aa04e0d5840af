"""Helpers shared by the ledger and verifier tests: ingest over HTTP, pinned keys, users per tenant."""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import Membership
from billing.models import Invoice
from billing.services import generate_invoice
from common.periods import month_bounds
from contracts.models import Contract
from ledger.notes import raw_public_key, verifier_key
from tests.factories import ContractFactory, ContractPriceFactory, SigningAgent
from treemeter_records import private_key_from_seed, public_key_to_b64
from treemeter_verify import PinnedKeys
from treemeter_verify.keys import agent_key_id
from treemeter_verify.note import parse_verifier_key

NOV = month_bounds("2026-11")


def send(client: Client, agent: SigningAgent, records: list[dict[str, Any]]) -> dict[str, Any]:
    response = client.post(
        "/v1/ingest/batches", data=agent.batch(records).body(), content_type="application/x-ndjson"
    )
    assert response.status_code == 200, response.content
    return response.json()


def platform_vkey() -> str:
    key = private_key_from_seed(settings.PLATFORM_SIGNING_KEY)
    return verifier_key(settings.LEDGER_ORIGIN, raw_public_key(key))


def pinned_keys(*agents: SigningAgent) -> PinnedKeys:
    raw = [base64.b64decode(public_key_to_b64(a.key)) for a in agents]
    return PinnedKeys(platform=parse_verifier_key(platform_vkey()), agents={agent_key_id(k): k for k in raw})


def keys_json(*agents: SigningAgent) -> dict[str, Any]:
    return {"platform": platform_vkey(), "agents": [public_key_to_b64(a.key) for a in agents]}


def priced_contract(**kwargs: Any) -> Contract:
    contract = ContractFactory.create(**kwargs)
    ContractPriceFactory.create(contract=contract, dimension="requests", unit_price=Decimal("0.05"))
    ContractPriceFactory.create(contract=contract, dimension="tokens_in", unit_price=Decimal("0.0002"))
    ContractPriceFactory.create(contract=contract, dimension="l3_seconds", unit_price=Decimal("0.80"))
    return contract


def november_invoice(contract: Contract) -> Invoice:
    return generate_invoice(contract.pk, *NOV)


def member_client(contract: Contract, username: str) -> Client:
    user = User.objects.create_user(username=username, password="pw")
    Membership.objects.create(user=user, tenant=contract.tenant)
    client = Client()
    client.force_login(user)
    return client


def staff_client() -> Client:
    user = User.objects.create_user(username="finance", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    return client
