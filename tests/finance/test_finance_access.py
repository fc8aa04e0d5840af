"""Every finance URL is for platform staff only: anonymous visitors are sent to sign in, customers
(even a tenant's owner) get 403, on every page, download and form."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.conf import settings
from django.shortcuts import resolve_url
from django.test import Client
from django.urls import URLPattern, reverse

from finance import urls as finance_urls
from tests.factories import TenantFactory
from tests.finance.support import owner_client, staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
ARGUMENTS = {"fmt": "csv", "pk": 1}


def _urls() -> list[tuple[str, str]]:
    """(method, url) of every finance URL pattern, whatever is added later."""
    found = []
    for pattern in finance_urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        kwargs = {name: ARGUMENTS[name] for name in pattern.pattern.converters}
        method = "post" if pattern.name == "dispute-resolve" else "get"
        found.append((method, reverse(f"finance:{pattern.name}", kwargs=kwargs)))
    return found


def test_the_enumeration_covers_every_report_and_format() -> None:
    urls = {url for _, url in _urls()}
    assert len(urls) == len(finance_urls.urlpatterns) == 18
    assert {
        "/finance/",
        "/finance/cost-split/",
        "/finance/cost-split/download.csv",
        "/finance/reconciliation/download.csv",
        "/finance/scheduler/",
        "/finance/scheduler/download.csv",
        "/finance/packages/",
        "/finance/packages/download.csv",
        "/finance/disputes/1/resolve",
    } <= urls


@pytest.mark.parametrize(("method", "url"), _urls())
def test_anonymous_visitors_are_sent_to_sign_in(method: str, url: str) -> None:
    response = getattr(Client(), method)(url)
    assert response.status_code == 302
    assert response["Location"] == f"{resolve_url(settings.LOGIN_URL)}?next={quote(url)}"


@pytest.mark.parametrize(("method", "url"), _urls())
def test_a_customer_owner_gets_403(method: str, url: str) -> None:
    client = owner_client(TenantFactory.create())
    response = getattr(client, method)(url, {"decision": "reject"} if method == "post" else None)
    assert response.status_code == 403


@pytest.mark.parametrize(("method", "url"), [(m, u) for m, u in _urls() if m == "get"])
def test_staff_see_every_page_and_download(method: str, url: str) -> None:
    assert staff_client().get(url).status_code == 200


def test_pages_take_no_post_and_the_form_takes_no_get() -> None:
    client = staff_client()
    assert client.post("/finance/invoices/").status_code == 405
    assert client.get("/finance/disputes/1/resolve").status_code == 405
