"""The package catalogue and buying a plan of a package (billing.purchases.purchase_package); the LLM
price catalogue's model prices (catalog.selectors.model_prices), per 1M tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.access import WRITE_BILLING, Principal
from billing.purchases import purchase_package
from catalog.models import ModelPrice
from catalog.selectors import active_packages, model_prices
from common.errors import ApiError
from common.money import DEFAULT_CURRENCY, MINOR_UNITS

from .. import selectors
from ..access import WRITE, portal_view
from .common import error_message, page
from .usage import ECHARTS, charts_available


@portal_view()
def packages(request: HttpRequest, principal: Principal) -> HttpResponse:
    return page(
        request,
        "frontend/packages.html",
        principal,
        "packages",
        packages=active_packages(principal),
        can_buy=principal.may_write(WRITE_BILLING) and not principal.is_staff,
    )


@portal_view(WRITE_BILLING, WRITE)
def buy(request: HttpRequest, principal: Principal) -> HttpResponse:
    """Buy a plan: Stripe Checkout plans go to the session's URL, invoiced ones to the new contract."""
    package_code, plan_code = request.POST.get("package", ""), request.POST.get("plan", "")
    try:
        purchase = purchase_package(principal, package_code, plan_code)
    except ApiError as error:
        messages.error(request, error_message(error))
        return redirect("portal-packages")
    if purchase.checkout_url:
        return redirect(purchase.checkout_url)
    messages.success(request, _("Contract %(code)s is active.") % {"code": purchase.contract.code})
    return redirect("portal-contract", code=purchase.contract.code)


# --- the LLM price catalogue -------------------------------------------------------------------------

DAY = re.compile(r"^\d{4}-\d{2}-\d{2}\Z", re.ASCII)
MILLION = Decimal(1_000_000)
SHOWN_MAX = 64  # characters of a bad query value repeated in the page's message


def per_million(price: Decimal) -> Decimal:
    """A per-token price per 1M tokens, exact and without trailing zeros (`0.0000025` → `2.5`)."""
    value = (price * MILLION).normalize()
    exponent = value.as_tuple().exponent
    return value.quantize(Decimal(1)) if isinstance(exponent, int) and exponent > 0 else value


@dataclass(frozen=True)
class PriceRow:
    """One version of a model's prices, per 1M tokens; a cache price the catalogue leaves empty is the
    input price (`*_is_input`)."""

    version: ModelPrice
    until: date | None  # the last day before the next version (None: still in force)
    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal
    cache_read_is_input: bool
    cache_write_is_input: bool
    history_query: str


def price_row(version: ModelPrice, query: dict[str, str], until: date | None = None) -> PriceRow:
    read, write = version.cache_read_per_token, version.cache_write_per_token
    return PriceRow(
        version=version,
        until=until,
        input=per_million(version.input_per_token),
        output=per_million(version.output_per_token),
        cache_read=per_million(version.input_per_token if read is None else read),
        cache_write=per_million(version.input_per_token if write is None else write),
        cache_read_is_input=read is None,
        cache_write_is_input=write is None,
        history_query=urlencode(query | {"model": version.model_id}),
    )


def default_currency(principal: Principal) -> str:
    """The currency of the tenant's first contract; CNY for staff and tenants without one."""
    if principal.is_staff:
        return DEFAULT_CURRENCY
    first = selectors.contracts(principal).order_by("starts_at", "pk").values_list("currency", flat=True)
    return first.first() or DEFAULT_CURRENCY


def _shown(raw: str) -> str:
    return raw if len(raw) <= SHOWN_MAX else raw[:SHOWN_MAX] + "…"


def _chart(history: list[PriceRow], last: date) -> dict[str, Any]:
    """The input and output price per 1M of each version as steps: [Unix ms (UTC), the exact price as a
    string, whether a version starts there]; the last step is drawn on to `last`."""

    def ms(day: date) -> int:
        return int(datetime.combine(day, time(), UTC).timestamp()) * 1000

    points = [(ms(row.version.effective_from), row.input, row.output, True) for row in history]
    if history and last > history[-1].version.effective_from:
        points.append((ms(last), history[-1].input, history[-1].output, False))
    return {
        "input": [[at, f"{price:f}", starts] for at, price, _, starts in points],
        "output": [[at, f"{price:f}", starts] for at, _, price, starts in points],
    }


@portal_view()
def model_price_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    """The versions in force on `as_of` (default today, UTC) in `currency` (default the tenant's), and
    with `model` that model's every version. A bad query value is named on the page, never an error."""
    today = timezone.now().date()
    problems: list[str] = []
    currency = default_currency(principal)
    raw_currency = request.GET.get("currency", "").strip()
    if raw_currency and raw_currency.upper() in MINOR_UNITS:
        currency = raw_currency.upper()
    elif raw_currency:
        problems.append(
            _("“%(value)s” is not a currency the catalogue prices in; showing %(currency)s.")
            % {"value": _shown(raw_currency), "currency": currency}
        )
    as_of = today
    raw_day = request.GET.get("as_of", "").strip()
    if raw_day:
        try:
            if DAY.match(raw_day) is None:
                raise ValueError(raw_day)
            as_of = date.fromisoformat(raw_day)
        except ValueError:
            problems.append(
                _("“%(value)s” is not a day (YYYY-MM-DD); showing the prices in force today, %(today)s.")
                % {"value": _shown(raw_day), "today": today.isoformat()}
            )
    query = {"currency": currency, "as_of": as_of.isoformat()}
    rows = [price_row(version, query) for version in model_prices(currency, as_of=as_of).order_by("model_id")]

    model = request.GET.get("model", "").strip()
    history: list[PriceRow] = []
    if model:
        versions = list(model_prices(currency, model_id=model).order_by("effective_from"))
        following: list[ModelPrice | None] = [*versions[1:], None]
        history = [
            price_row(v, query, None if after is None else after.effective_from - timedelta(days=1))
            for v, after in zip(versions, following, strict=False)  # the next version, if any
        ]
        if not history:
            problems.append(
                _("The catalogue has no prices for the model “%(model)s” in %(currency)s.")
                % {"model": _shown(model), "currency": currency}
            )
    in_force = next((row for row in reversed(history) if row.version.effective_from <= as_of), None)
    return page(
        request,
        "frontend/model_prices.html",
        principal,
        "model-prices",
        rows=rows,
        currency=currency,
        currencies=sorted(MINOR_UNITS),
        as_of=as_of,
        model=model if history else "",
        history=history,
        in_force=in_force,
        problems=problems,
        has_any=bool(rows) or model_prices(currency).exists(),
        back_query=urlencode(query),
        export_url=f"{reverse('model-price-export')}?{urlencode(query)}",
        chart=_chart(history, max(today, as_of)) if history else None,
        chart_text={"input": _("Input"), "output": _("Output"), "per_million": _("per 1M tokens")},
        charts_available=charts_available(),
        echarts=ECHARTS,
    )
