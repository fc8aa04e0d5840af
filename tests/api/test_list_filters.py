"""One rule for a list filter that names what the caller cannot see (common.filters): 200 with an empty
list, exactly as for a name that does not exist, on every list; and an answer over no records on the
usage endpoints. Each filter is also shown to work on the caller's own objects, so an empty answer
means "filtered", not "ignored"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from accounts.models import Role
from billing.api import CreditNoteFilter, InvoiceFilter, OutcomeFilter
from common.filters import ListFilter
from contracts.api import ContractFilter
from entitlements.api import ApiKeyFilter
from sla.api import AlertFilter, ReportFilter
from tests.api.conftest import staff_client
from tests.schemathesis.tenant_data import TenantData, build_tenant
from webhooks.api import DeliveryFilter

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set(cls.__subclasses__())
    return found | {sub for child in found for sub in _subclasses(child)}


# Every ListFilter and the list it narrows (for the caller `t`).
LISTS: dict[type[ListFilter], Callable[[TenantData], str]] = {
    ApiKeyFilter: lambda t: "/v1/keys",
    ContractFilter: lambda t: "/v1/contracts",
    InvoiceFilter: lambda t: "/v1/invoices",
    CreditNoteFilter: lambda t: "/v1/credit-notes",
    OutcomeFilter: lambda t: "/v1/outcomes",
    DeliveryFilter: lambda t: f"/v1/webhooks/endpoints/{t.webhook.pk}/deliveries",
    ReportFilter: lambda t: "/v1/sla/reports",
    AlertFilter: lambda t: "/v1/sla/alerts",
}
# Filters that name an object, and that object of a tenant.
OBJECT_FILTERS: dict[str, Callable[[TenantData], str]] = {
    "contract": lambda t: t.contract.code,
    "package": lambda t: t.package.code,
    "invoice": lambda t: str(t.invoice.pk),
    "tenant": lambda t: t.tenant.code,
}
NO_SUCH = {"contract": "no-such-contract", "package": "no-such-package", "invoice": "987654321"}
# Filters over values rather than objects: nothing to hide.
VALUE_FILTERS = {"status", "period", "month", "open"}


@pytest.fixture
def tenants() -> tuple[TenantData, TenantData]:
    return build_tenant("alpha"), build_tenant("bravo")


def test_every_list_filter_is_covered_here() -> None:
    """A new ListFilter must say which list it narrows; a new field, whether it names an object."""
    assert _subclasses(ListFilter) == set(LISTS)
    fields = {name for filter_class in LISTS for name in filter_class().fields}
    assert fields - VALUE_FILTERS - set(OBJECT_FILTERS) == set()


def _object_cases() -> list[tuple[type[ListFilter], str]]:
    return [(f, str(name)) for f in LISTS for name in f().fields if name in OBJECT_FILTERS]


@pytest.mark.parametrize(
    ("filter_class", "field"), _object_cases(), ids=[f"{f.__name__}.{n}" for f, n in _object_cases()]
)
def test_a_filter_naming_another_tenants_object_answers_an_empty_list(
    tenants: tuple[TenantData, TenantData], filter_class: type[ListFilter], field: str
) -> None:
    caller, other = tenants
    url = LISTS[filter_class](caller)
    for client in (caller.client(Role.OWNER, token=True), caller.client(Role.READ_ONLY)):
        own = client.get(url, {field: OBJECT_FILTERS[field](caller)})
        assert own.status_code == 200, own.content
        assert own.json()["results"] != [], f"{url}?{field}= finds nothing of the caller's own"
        theirs = client.get(url, {field: OBJECT_FILTERS[field](other)})
        missing = client.get(url, {field: NO_SUCH[field]})
        assert (theirs.status_code, missing.status_code) == (200, 200), (theirs.content, missing.content)
        assert theirs.json() == missing.json() == {"next": None, "previous": None, "results": []}


USAGE = [
    ("timeseries", {"dimension": "requests"}),
    ("experts", {}),
    ("routing", {}),
    ("latency", {}),
    ("breakdown", {"by": "contract"}),
]
DAYS = {"start": "2026-11-01", "end": "2026-12-01"}


@pytest.mark.parametrize(("endpoint", "params"), USAGE, ids=[e for e, _ in USAGE])
def test_usage_filters_follow_the_same_rule(
    tenants: tuple[TenantData, TenantData], endpoint: str, params: dict[str, str]
) -> None:
    caller, other = tenants
    client = caller.client(Role.OWNER, token=True)

    def get(**filters: str) -> Any:
        response = client.get(f"/v1/usage/{endpoint}", {**params, **DAYS, **filters})
        assert response.status_code == 200, (filters, response.content)
        return response.json()

    everything = get()
    assert everything == get(contract=caller.contract.code) == get(tenant=caller.tenant.code)
    nothing = get(contract=NO_SUCH["contract"])
    assert nothing != everything  # the caller has usage: an empty answer means "filtered"
    for name in ("contract", "package", "tenant"):
        assert get(**{name: OBJECT_FILTERS[name](other)}) == nothing, name
    assert get(package=NO_SUCH["package"]) == nothing
    assert get(tenant="no-such-tenant") == nothing


def test_staff_filters_name_any_tenant_and_a_missing_one_gives_nothing(
    tenants: tuple[TenantData, TenantData],
) -> None:
    _, other = tenants
    staff = staff_client()
    rows = staff.get("/v1/usage/breakdown", {"by": "contract", **DAYS, "tenant": other.tenant.code}).json()
    assert [row["key"] for row in rows["rows"]] == [other.contract.code]
    missing = staff.get("/v1/usage/breakdown", {"by": "contract", **DAYS, "tenant": "no-such-tenant"})
    assert (missing.status_code, missing.json()["rows"]) == (200, [])
    assert staff.get("/v1/invoices", {"contract": other.contract.code}).json()["results"] != []
