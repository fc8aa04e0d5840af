"""API keys in the portal: the secret is shown once, only own contracts, revoke over htmx."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.models import Role
from entitlements.models import ApiKey
from entitlements.services import issue_api_key
from tests.factories import ContractFactory
from tests.frontend.support import member
from treemeter_records.protocol import api_key_hash

pytestmark = pytest.mark.django_db


def test_a_new_key_is_shown_once_and_stored_only_as_its_hash() -> None:
    contract = ContractFactory.create()
    developer = member(contract.tenant, Role.DEVELOPER)
    response = developer.post(
        reverse("portal-keys"),
        {"contract": contract.code, "name": "batch jobs", "sla_class": "gold", "quota_tokens": "50000"},
    )
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    [key] = ApiKey.objects.all()
    secret = response.context["issued"].secret
    text = response.content.decode()
    assert f'data-testid="new-key-secret">{secret}</code>' in text
    assert (key.key_hash, key.prefix, key.name, key.sla_class, key.quota_tokens) == (
        api_key_hash(secret),
        secret[:12],
        "batch jobs",
        "gold",
        50000,
    )
    assert (key.tenant, key.contract) == (contract.tenant, contract)
    again = developer.get(reverse("portal-keys")).content.decode()
    assert secret not in again and f'data-testid="key-row-{key.prefix}"' in again
    assert 'data-testid="new-key"' not in again


def test_a_key_only_for_the_tenants_own_active_contracts() -> None:
    own, other = ContractFactory.create(), ContractFactory.create()
    owner = member(own.tenant)
    refused = owner.post(reverse("portal-keys"), {"contract": other.code, "sla_class": "standard"})
    assert refused.status_code == 400
    text = refused.content.decode()
    assert "Choose one of your active contracts." in text and other.code not in text
    ended = ContractFactory.create(tenant=own.tenant, status="ended")
    assert (
        owner.post(reverse("portal-keys"), {"contract": ended.code, "sla_class": "standard"}).status_code
        == 400
    )
    assert ApiKey.objects.count() == 0


def test_revoking_over_htmx_answers_the_updated_row() -> None:
    contract = ContractFactory.create()
    issued = issue_api_key(contract_code=contract.code, name="ci")
    owner = member(contract.tenant, Role.OWNER, language="zh-hans")
    url = reverse("portal-key-revoke", kwargs={"prefix": issued.api_key.prefix})
    response = owner.post(url, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    text = response.content.decode()
    assert text.lstrip().startswith(f'<tr id="key-{issued.api_key.prefix}"') and "已吊销" in text
    assert "<html" not in text and "key-revoke-" not in text
    issued.api_key.refresh_from_db()
    first = issued.api_key.revoked_at
    assert first is not None
    # Without htmx: back to the list; revoking again keeps the first time.
    plain = owner.post(url)
    assert (plain.status_code, plain["Location"]) == (302, reverse("portal-keys"))
    issued.api_key.refresh_from_db()
    assert issued.api_key.revoked_at == first


def test_another_tenants_key_cannot_be_revoked() -> None:
    theirs = issue_api_key(contract_code=ContractFactory.create().code)
    owner = member(ContractFactory.create().tenant)
    url = reverse("portal-key-revoke", kwargs={"prefix": theirs.api_key.prefix})
    assert owner.post(url, HTTP_HX_REQUEST="true").status_code == 404
    theirs.api_key.refresh_from_db()
    assert theirs.api_key.revoked_at is None
