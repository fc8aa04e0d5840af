"""Contracts, with each quota (a price's included quantity) against this month's usage."""

from __future__ import annotations

from decimal import Decimal

from django.http import Http404, HttpRequest, HttpResponse

from accounts.access import Principal
from billing.business_events import business_events
from common.periods import month_of

from .. import selectors
from ..access import portal_view
from .common import page


def catalogue_adjustment(adjustment: Decimal) -> tuple[str, Decimal]:
    """A catalogue-priced contract's adjustment as a sign and a percentage without trailing zeros:
    0.1 → ("+", 10), -0.15 → ("−", 15), 0 → ("", 0): at list price."""
    percent = (abs(adjustment) * 100).normalize()
    exponent = percent.as_tuple().exponent
    if isinstance(exponent, int) and exponent > 0:
        percent = percent.quantize(Decimal(1))
    return ("+" if adjustment > 0 else "\u2212" if adjustment < 0 else ""), percent


@portal_view()
def contract_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    rows = selectors.contracts(principal).prefetch_related("prices")
    return page(request, "frontend/contracts.html", principal, "contracts", contracts=rows)


@portal_view()
def contract_detail(request: HttpRequest, principal: Principal, code: str) -> HttpResponse:
    contract = selectors.contracts(principal).prefetch_related("prices", "metrics").filter(code=code).first()
    if contract is None:
        raise Http404
    start, end = selectors.current_period()
    sign, percent = catalogue_adjustment(contract.catalogue_adjustment)
    return page(
        request,
        "frontend/contract.html",
        principal,
        "contracts",
        contract=contract,
        period_start=start,
        quotas=selectors.quotas(contract, start, end),
        key_quotas=selectors.key_quotas(
            selectors.api_keys(principal).filter(contract=contract), month_of(start)
        ),
        contract_tokens=selectors.contract_tokens(contract, start, end),
        events=business_events(contract, start, end).packages,
        invoices=selectors.invoices(principal).filter(contract=contract)[:12],
        catalogue_sign=sign,
        catalogue_percent=percent,
    )
