"""Every portal page over a real tenant data set (real ingest, invoice, dispute, SLA report, webhook):
renders for an owner in both languages, hides other tenants' objects (404), and lets a read-only
member read but neither see write buttons nor POST."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import Role
from tests.schemathesis.tenant_data import TenantData, build_tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]

# Page name → its URL kwargs from a tenant's data set, and a string only that object's page shows.
PAGES: dict[str, Callable[[TenantData], dict[str, Any]]] = {
    "portal-home": lambda d: {},
    "portal-packages": lambda d: {},
    "portal-model-prices": lambda d: {},
    "portal-factory": lambda d: {},
    "portal-factory-build": lambda d: {"code": d.built.package.code},
    "portal-sandbox": lambda d: {},
    "portal-contracts": lambda d: {},
    "portal-contract": lambda d: {"code": d.contract.code},
    "portal-usage": lambda d: {},
    "portal-invoices": lambda d: {},
    "portal-invoice": lambda d: {"pk": d.invoice.pk},
    "portal-line-records": lambda d: {"pk": d.invoice.pk, "line_pk": d.free_line.pk},
    "portal-record": lambda d: {"record_id": d.record_ids[0]},
    "portal-dispute-line": lambda d: {"pk": d.invoice.pk, "line_pk": d.free_line.pk},
    "portal-notes": lambda d: {},
    "portal-disputes": lambda d: {},
    "portal-receipts": lambda d: {},
    "portal-dispute": lambda d: {"pk": d.dispute.pk},
    "portal-sla-reports": lambda d: {},
    "portal-sla-report": lambda d: {"pk": d.sla_report.pk},
    "portal-keys": lambda d: {},
    "portal-webhooks": lambda d: {},
    "portal-webhook": lambda d: {"pk": d.webhook.pk},
    "portal-releases": lambda d: {},
    "portal-release-stage": lambda d: {"code": d.release.code, "position": 1},
}
# What each page must show of the tenant's own data (en).
SHOWS: dict[str, Callable[[TenantData], str]] = {
    "portal-factory": lambda d: d.built.package.code,
    "portal-factory-build": lambda d: d.built.capability.artifact_id or "",
    "portal-sandbox": lambda d: d.sandbox.contract.code,
    "portal-contracts": lambda d: d.contract.code,
    "portal-contract": lambda d: d.contract.code,
    "portal-invoices": lambda d: d.invoice.number or "",
    "portal-invoice": lambda d: d.invoice.number or "",
    "portal-notes": lambda d: d.credit_note.number,
    "portal-disputes": lambda d: d.dispute.reason,
    "portal-dispute": lambda d: d.dispute.reason,
    "portal-sla-reports": lambda d: d.contract.code,
    "portal-sla-report": lambda d: d.contract.code,
    "portal-keys": lambda d: d.api_key.prefix,
    "portal-webhooks": lambda d: d.webhook.url,
    "portal-webhook": lambda d: d.event.event_id,
    "portal-releases": lambda d: d.release.code,
    "portal-release-stage": lambda d: d.release.code,
}
# Object pages: the URL names one object of the tenant.
OBJECT_PAGES = [
    "portal-factory-build",
    "portal-contract",
    "portal-invoice",
    "portal-line-records",
    "portal-record",
    "portal-dispute-line",
    "portal-dispute",
    "portal-sla-report",
    "portal-webhook",
    "portal-release-stage",
]
# Write endpoints with a form body aimed at the tenant's own objects.
WRITES: dict[str, tuple[Callable[[TenantData], dict[str, Any]], Callable[[TenantData], dict[str, Any]]]] = {
    "portal-buy": (lambda d: {}, lambda d: {"package": d.package.code, "plan": "standard"}),
    "portal-factory": (lambda d: {}, lambda d: {"template": "contract-review", "package_code": "probe"}),
    "portal-sandbox": (lambda d: {}, lambda d: {"action": "key", "package": d.built.package.code}),
    "portal-keys": (lambda d: {}, lambda d: {"contract": d.contract.code, "sla_class": "standard"}),
    "portal-key-revoke": (lambda d: {"prefix": d.api_key.prefix}, lambda d: {}),
    "portal-dispute-line": (
        lambda d: {"pk": d.invoice.pk, "line_pk": d.free_line.pk},
        lambda d: {"reason": "too many tokens"},
    ),
    "portal-delivery-replay": (lambda d: {"pk": d.delivery.pk}, lambda d: {}),
    "portal-webhooks": (lambda d: {}, lambda d: {"url": "https://probe.example/hook"}),
}


@pytest.fixture
def alpha() -> TenantData:
    return build_tenant("alpha")


@pytest.fixture
def two_tenants() -> tuple[TenantData, TenantData]:
    return build_tenant("alpha"), build_tenant("bravo")


def _in(client: Client, language: str) -> Client:
    client.cookies["django_language"] = language
    return client


def test_every_page_renders_for_an_owner_in_english_and_chinese(alpha: TenantData) -> None:
    english, chinese = _in(alpha.client(Role.OWNER), "en"), _in(alpha.client(Role.OWNER), "zh-hans")
    for name, kwargs in PAGES.items():
        url = reverse(name, kwargs=kwargs(alpha))
        en, zh = english.get(url), chinese.get(url)
        assert (en.status_code, zh.status_code) == (200, 200), url
        en_text, zh_text = en.content.decode(), zh.content.decode()
        assert '<html lang="en">' in en_text and '<html lang="zh-hans">' in zh_text, url
        assert "Sign out" in en_text and "退出登录" in zh_text and "Sign out" not in zh_text, url
        assert "发票" in zh_text and "发票" not in en_text, url  # "Invoices" in the nav
        shown = SHOWS.get(name)
        if shown is not None:
            assert shown(alpha) in en_text and shown(alpha) in zh_text, url


def test_pages_of_another_tenants_objects_answer_404(two_tenants: tuple[TenantData, TenantData]) -> None:
    alpha, bravo = two_tenants
    for role in (Role.OWNER, Role.READ_ONLY):
        attacker = alpha.client(role)
        for name in OBJECT_PAGES:
            url = reverse(name, kwargs=PAGES[name](bravo))
            assert attacker.get(url).status_code == 404, (role, url)
        for name in ("portal-key-revoke", "portal-dispute-line", "portal-delivery-replay"):
            url_kwargs, body = WRITES[name]
            response = alpha.client(Role.OWNER).post(reverse(name, kwargs=url_kwargs(bravo)), body(bravo))
            assert response.status_code == 404, name
    # Lists show only the tenant's own rows.
    owner = alpha.client(Role.OWNER)
    for name in PAGES:
        if name in OBJECT_PAGES:
            continue
        text = owner.get(reverse(name)).content.decode()
        leaked = [m for m in bravo.markers() if m and m in text]
        assert leaked == [], (name, leaked)
    bravo.api_key.refresh_from_db()
    assert bravo.api_key.revoked_at is None
    assert bravo.invoice.disputes.count() == 1  # only the one bravo opened itself


def test_read_only_members_read_everything_but_get_no_write_buttons_and_403_on_post(
    alpha: TenantData,
) -> None:
    reader = alpha.client(Role.READ_ONLY)
    for name, kwargs in PAGES.items():
        if name == "portal-dispute-line":
            continue  # the dispute form itself is a write page
        assert reader.get(reverse(name, kwargs=kwargs(alpha))).status_code == 200, name
    invoice = reader.get(reverse("portal-invoice", kwargs={"pk": alpha.invoice.pk})).content.decode()
    assert 'data-testid="invoice-pdf"' in invoice
    assert "dispute-button-" not in invoice
    keys = reader.get(reverse("portal-keys")).content.decode()
    assert 'data-testid="key-form"' not in keys and "key-revoke-" not in keys
    webhook = reader.get(reverse("portal-webhook", kwargs={"pk": alpha.webhook.pk})).content.decode()
    assert "replay-" not in webhook
    packages = reader.get(reverse("portal-packages")).content.decode()
    assert 'data-testid="buy-' not in packages
    for name, (url_kwargs, body) in WRITES.items():
        response = reader.post(reverse(name, kwargs=url_kwargs(alpha)), body(alpha))
        assert response.status_code == 403, name
        assert "Your role may only read this page." in response.content.decode()
    assert (
        reader.get(reverse("portal-dispute-line", kwargs=PAGES["portal-dispute-line"](alpha))).status_code
        == 200
    )
    alpha.api_key.refresh_from_db()
    assert alpha.api_key.revoked_at is None
    assert alpha.api_key.contract.api_keys.count() == 1
    assert alpha.free_line.disputes.count() == 0
    assert alpha.tenant.webhook_endpoints.count() == 1


def test_an_owner_sees_the_write_buttons(alpha: TenantData) -> None:
    owner = alpha.client(Role.OWNER)
    invoice = owner.get(reverse("portal-invoice", kwargs={"pk": alpha.invoice.pk})).content.decode()
    # The disputed line links its dispute; every other line has a dispute button.
    assert f'data-testid="line-dispute-{alpha.line.pk}"' in invoice
    assert f'data-testid="dispute-button-{alpha.free_line.pk}"' in invoice
    assert f'data-testid="dispute-button-{alpha.line.pk}"' not in invoice
    keys = owner.get(reverse("portal-keys")).content.decode()
    assert 'data-testid="key-form"' in keys and f'data-testid="key-revoke-{alpha.api_key.prefix}"' in keys


def test_anonymous_visitors_are_sent_to_sign_in(alpha: TenantData) -> None:
    for name, kwargs in PAGES.items():
        url = reverse(name, kwargs=kwargs(alpha))
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/?next="), url


def test_sign_in_and_sign_out(alpha: TenantData) -> None:
    client = Client()
    form = client.get(reverse("portal-login")).content.decode()
    assert 'data-testid="login-form"' in form
    wrong = client.post(reverse("portal-login"), {"username": "alpha-owner", "password": "nope"})
    assert wrong.status_code == 200 and 'data-testid="login-error"' in wrong.content.decode()
    signed_in = client.post(
        reverse("portal-login"), {"username": "alpha-owner", "password": "pw-isolation-1"}
    )
    assert (signed_in.status_code, signed_in["Location"]) == (302, "/")
    assert alpha.contract.code in client.get(reverse("portal-contracts")).content.decode()
    signed_out = client.post(reverse("portal-logout"))
    assert (signed_out.status_code, signed_out["Location"]) == (302, reverse("portal-login"))
    assert client.get(reverse("portal-contracts")).status_code == 302


def test_the_language_switcher_sets_chinese(alpha: TenantData) -> None:
    client = alpha.client(Role.OWNER)
    page = client.get(reverse("portal-invoices")).content.decode()
    assert 'data-testid="language-switcher"' in page and 'value="zh-hans"' in page
    switched = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/invoices/"})
    assert (switched.status_code, switched["Location"]) == (302, "/invoices/")
    assert "<h1>发票</h1>" in client.get("/invoices/").content.decode()


def test_other_methods_are_refused(alpha: TenantData) -> None:
    owner = alpha.client(Role.OWNER)
    assert owner.delete(reverse("portal-keys")).status_code == 405
    assert owner.get(reverse("portal-key-revoke", kwargs={"prefix": alpha.api_key.prefix})).status_code == 405
    assert owner.post(reverse("portal-invoices")).status_code == 405


def test_every_portal_url_in_every_role_with_bodies_naming_another_tenant(
    two_tenants: tuple[TenantData, TenantData],
) -> None:
    """GET with a query and POST with a form body naming the other tenant's objects, on every portal
    URL aimed at the tenant's own objects: no server error, no answer below 400 holding the other
    tenant's identifiers, and none of its objects changed."""
    alpha, bravo = two_tenants
    hostile = {
        "contract": bravo.contract.code,
        "package": bravo.package.code,
        "plan": "standard",
        "tenant": bravo.tenant.code,
        "line": str(bravo.free_line.pk),
        "invoice": str(bravo.invoice.pk),
        "prefix": bravo.api_key.prefix,
        "reason": "probe",
        "url": "https://probe.example/hook",
        "sla_class": "standard",
    }
    query = "?" + "&".join(f"{k}={v}" for k, v in hostile.items())
    markers = [m for m in bravo.markers() if m]
    before = (
        bravo.tenant.contracts.count(),
        bravo.tenant.api_keys.filter(revoked_at=None).count(),
        bravo.tenant.disputes.count(),
        bravo.tenant.webhook_endpoints.count(),
        bravo.delivery.attempts.count(),
    )
    urls = [reverse(name, kwargs=kwargs(alpha)) for name, kwargs in PAGES.items()]
    urls += [reverse(name, kwargs=url_kwargs(alpha)) for name, (url_kwargs, _) in WRITES.items()]
    for role in (Role.OWNER, Role.BILLING, Role.DEVELOPER, Role.READ_ONLY):
        client = alpha.client(role)
        for url in urls:
            for response in (client.get(url + query), client.post(url, hostile)):
                text = response.content.decode()
                assert response.status_code < 500, (role, url, text[:300])
                if response.status_code < 400:
                    assert [m for m in markers if m in text] == [], (role, url)
    after = (
        bravo.tenant.contracts.count(),
        bravo.tenant.api_keys.filter(revoked_at=None).count(),
        bravo.tenant.disputes.count(),
        bravo.tenant.webhook_endpoints.count(),
        bravo.delivery.attempts.count(),
    )
    assert after == before
