"""Contract terms as plain data: what an invoice is rated with, and what a finalised invoice keeps.

`terms_of(contract)` reads the contract's current terms; `Terms.as_json()` is the copy a finalised
invoice stores, and `Terms.from_json` reads it back, so re-rating a closed period uses the terms it was
billed with even after the contract changed. A dimension whose price changed within the period has one
ChargeTerms per version (`effective_from`), all of them in the copy.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol

from django.db.models import TextField
from django.db.models.functions import Cast

from catalog.models import ComputePackage, PackageCapability
from common.money import MINOR_UNITS
from contracts.models import Contract, ContractMetric, ContractPrice, ContractTax
from pricing.charge_models import ChargeModel, build_charge_model
from pricing.dimensions import CATALOGUE_DIMENSIONS, DIMENSION_CODES, DIMENSION_LABELS, event_unit_label
from pricing.errors import TermsError
from pricing.expressions import ADDITIVE_AGGREGATIONS, metric_aggregation, parse_metric
from pricing.validation import catalogue_priced, validate_charge

from .models import Coupon
from .taxes import TaxTerms


@dataclass(frozen=True)
class ChargeTerms:
    dimension: str
    label: str
    charge_model: str
    properties: dict[str, Any]
    included_quantity: str = "0"
    effective_from: str = ""  # ISO 8601 UTC; "": from the contract start

    def model(self) -> ChargeModel:
        """The charge model of these terms, built once (terms read for a batch share their charges)."""
        model: ChargeModel | None = self.__dict__.get("_model")
        if model is None:
            model = build_charge_model(self.charge_model, self.properties)
            object.__setattr__(self, "_model", model)  # not a field: eq, asdict and as_json ignore it
        return model

    def starts(self) -> datetime | None:
        return datetime.fromisoformat(self.effective_from) if self.effective_from else None


@dataclass(frozen=True)
class CouponTerms:
    code: str
    percent_off: str | None
    amount_off: str | None
    periods: int | None


@dataclass(frozen=True)
class CatalogueTerms:
    """Tokens priced per model by the LLM price catalogue (catalog.ModelPrice), adjusted by the
    contract's `adjustment` (0.1: 10 % markup). `prices`: the catalogue versions the period's records
    used, pinned when the period is rated (`billing.catalogue`), so a finalised invoice keeps them."""

    adjustment: str
    prices: tuple[CataloguePrice, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"adjustment": self.adjustment, "prices": [p.as_json() for p in self.prices]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CatalogueTerms:
        return cls(data["adjustment"], tuple(CataloguePrice(**p) for p in data.get("prices", [])))


@dataclass(frozen=True)
class EventTerms:
    """How one package's business events are measured (billing.business_events): its code, the model ids
    of its required capabilities, and each capability's acceptance rule by model id (none: accepted).
    An invoice pins them under its unit, as it pins custom metrics."""

    package: str
    required: tuple[str, ...]
    rules: dict[str, str]

    def as_json(self) -> dict[str, Any]:
        return {"package": self.package, "required": list(self.required), "rules": dict(self.rules)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EventTerms:
        return cls(data["package"], tuple(data["required"]), dict(data["rules"]))


def priced_events(contract: Contract, dimensions: Iterable[str], metrics: Set[str]) -> dict[str, EventTerms]:
    """The business-event units among the dimensions the contract prices: those neither built in nor a
    metric of it (only then are its packages read)."""
    others = set(dimensions) - set(DIMENSION_LABELS) - set(metrics)
    return event_terms(contract, others) if others else {}


def event_terms(contract: Contract, units: Set[str] | None = None) -> dict[str, EventTerms]:
    """The contract's business-event units (of those in `units`, when given) and how each is measured.
    TermsError when two packages it holds share a unit: a price by that unit would bill both."""
    found = {}
    for unit, packages in contract.event_packages().items():
        if units is not None and unit not in units:
            continue
        if len(packages) > 1:
            raise TermsError(
                "ambiguous_event_unit",
                f"Packages {', '.join(p.code for p in packages)} are both measured in {unit!r}.",
                {"unit": unit, "packages": [p.code for p in packages]},
            )
        found[unit] = package_event_terms(packages[0])
    return found


def package_event_terms(package: ComputePackage) -> EventTerms:
    """How the package's business events are measured, from its capabilities."""
    links = PackageCapability.objects.filter(package=package).select_related("capability")
    capabilities = [(link.capability, link.required) for link in links.order_by("capability__model_id")]
    return EventTerms(
        package.code,
        tuple(c.model_id for c, required in capabilities if required),
        {c.model_id: c.acceptance_rule for c, _ in capabilities if c.acceptance_rule},
    )


@dataclass(frozen=True)
class CataloguePrice:
    """One catalogue version as rating uses it: per-token prices as decimal text, a cache price the
    catalogue does not state being the input price."""

    model_id: str
    effective_from: str  # ISO day (UTC)
    input: str
    output: str
    cache_read: str
    cache_write: str

    def as_json(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in _PRICE_FIELDS}


_PRICE_FIELDS = ("model_id", "effective_from", "input", "output", "cache_read", "cache_write")
_CONTAINERS = ("credit_order", "charges", "metrics", "coupons", "taxes", "catalogue", "events")


@dataclass(frozen=True)
class Terms:
    contract: str
    currency: str
    base_fee: str = "0"
    base_fee_timing: str = "arrears"
    minimum_commitment: str = "0"
    tax_rate: str = "0"
    tax_inclusive: bool = False
    credit_order: list[str] = field(default_factory=list)
    charges: list[ChargeTerms] = field(default_factory=list)
    metrics: dict[str, str] = field(default_factory=dict)
    coupons: list[CouponTerms] = field(default_factory=list)
    taxes: list[TaxTerms] = field(default_factory=list)  # empty: the single `tax_rate` on the subtotal
    catalogue: CatalogueTerms | None = None  # tokens priced by the LLM price catalogue
    events: dict[str, EventTerms] = field(default_factory=dict)  # priced business-event units
    starts_at: str = ""
    ends_at: str = ""
    outcome_window_hours: int = 72
    outcome_on_expiry: str = "confirm"
    outcome_rule: str = ""

    def as_json(self) -> dict[str, Any]:
        """A plain copy (what dataclasses.asdict gives, built directly: asdict deep-copies each value
        through a generic walk, a third of the batch run's rating time). Only the charges' properties,
        the metrics and the credit order are containers; every other field is a str, int or bool."""
        data = {name: getattr(self, name) for name in _TERMS_SCALARS}
        data["credit_order"] = list(self.credit_order)
        data["metrics"] = dict(self.metrics)
        data["charges"] = [
            {**{name: getattr(c, name) for name in _CHARGE_FIELDS}, "properties": _plain(c.properties)}
            for c in self.charges
        ]
        data["coupons"] = [{name: getattr(c, name) for name in _COUPON_FIELDS} for c in self.coupons]
        data["taxes"] = [t.as_json() for t in self.taxes]
        data["catalogue"] = self.catalogue.as_json() if self.catalogue is not None else None
        data["events"] = {unit: e.as_json() for unit, e in self.events.items()}
        return data

    def versions(self) -> dict[str, list[ChargeTerms]]:
        """The charges per dimension, each dimension's versions oldest first, in dimension order."""
        grouped: dict[str, list[ChargeTerms]] = {}
        for charge in self.charges:
            grouped.setdefault(charge.dimension, []).append(charge)
        return grouped

    def additive(self, dimension: str) -> bool:
        """Whether the dimension's period quantity is the sum of its parts' (every built-in one is; a
        custom metric by its aggregation)."""
        expression = self.metrics.get(dimension)
        return expression is None or metric_aggregation(expression) in ADDITIVE_AGGREGATIONS

    def change_instants(self, start: datetime, end: datetime) -> tuple[datetime, ...]:
        """The instants inside (start, end) where some dimension's price changes: where rating splits."""
        instants = {
            moment
            for charge in self.charges
            if (moment := charge.starts()) is not None and start < moment < end
        }
        return tuple(sorted(instants))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Terms:
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["charges"] = [ChargeTerms(**c) for c in data.get("charges", [])]
        values["coupons"] = [CouponTerms(**c) for c in data.get("coupons", [])]
        values["taxes"] = [TaxTerms.from_json(t) for t in data.get("taxes", [])]
        catalogue = data.get("catalogue")
        values["catalogue"] = CatalogueTerms.from_json(catalogue) if catalogue is not None else None
        values["events"] = {unit: EventTerms.from_json(e) for unit, e in data.get("events", {}).items()}
        return cls(**values)


_TERMS_SCALARS = tuple(
    f.name for f in fields(Terms) if f.name not in ("charges", "coupons", "taxes", "catalogue", "events")
)
_CHARGE_FIELDS = tuple(f.name for f in fields(ChargeTerms) if f.name != "properties")
_COUPON_FIELDS = tuple(f.name for f in fields(CouponTerms))
if [f.name for f in fields(ChargeTerms) if f.type not in ("str", "dict[str, Any]")] or [
    f.name for f in fields(Terms) if f.type not in ("str", "bool", "int") and f.name not in _CONTAINERS
]:
    raise RuntimeError("Terms.as_json copies only the known container fields: add the new one there")


def _plain(value: Any) -> Any:
    """A copy of JSON-like data: dicts and lists copied all the way down, other values as they are."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


_BEGINNING = datetime.min.replace(tzinfo=UTC)


def decimal_text(value: Decimal) -> str:
    """A decimal as terms keep it: plain digits, no exponent, no trailing zeros."""
    return format(value.normalize(), "f")


def _charge_terms(price: PriceRow, label: str, metrics: frozenset[str]) -> ChargeTerms:
    """One price version's charge terms, validated against the contract's metric codes."""
    properties = dict(price.properties)
    if price.charge_model == "per_unit":
        properties.setdefault("unit_price", decimal_text(price.unit_price))
    validate_charge(price.dimension, price.charge_model, properties, set(metrics))
    return ChargeTerms(
        dimension=price.dimension,
        label=label,
        charge_model=price.charge_model,
        properties=properties,
        included_quantity=decimal_text(price.included_quantity),
        effective_from=price.effective_from.isoformat() if price.effective_from else "",
    )


def _in_period(prices: list[PriceRow], start: datetime | None, end: datetime | None) -> list[PriceRow]:
    """The price versions that apply at some time in [start, end) (all of them without a period)."""
    if start is None or end is None or not prices:
        return prices  # a contract of base fee only has no price versions
    kept = []
    for price, following in zip(prices, [*prices[1:], None], strict=True):
        superseded = (
            following is not None
            and following.dimension == price.dimension
            and following.effective_from is not None
            and following.effective_from <= start
        )
        if not superseded and (price.effective_from is None or price.effective_from < end):
            kept.append(price)
    return kept


class MetricRow(Protocol):
    """A contract's custom metric as terms read it (a ContractMetric, or its row)."""

    @property
    def code(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def expression(self) -> str: ...


class PriceRow(Protocol):
    """A price version as terms read it (a ContractPrice, or its row)."""

    @property
    def dimension(self) -> str: ...
    @property
    def charge_model(self) -> str: ...
    @property
    def properties(self) -> dict[str, Any]: ...
    @property
    def unit_price(self) -> Decimal: ...
    @property
    def included_quantity(self) -> Decimal: ...
    @property
    def effective_from(self) -> datetime | None: ...


class CouponRow(Protocol):
    """A coupon as terms read it (a Coupon, or its row)."""

    @property
    def code(self) -> str: ...
    @property
    def percent_off(self) -> Decimal | None: ...
    @property
    def amount_off(self) -> Decimal | None: ...
    @property
    def periods(self) -> int | None: ...


@dataclass(frozen=True)
class TermsRows:
    """What a contract's terms are made of besides the contract row, each in its model's order.
    `shared`: what the terms of a batch's contracts have in common, validated once (`terms_rows`)."""

    metrics: Sequence[MetricRow] = ()
    prices: Sequence[PriceRow] = ()
    coupons: Sequence[CouponRow] = ()
    shared: dict[Any, Any] | None = None
    taxes: Sequence[ContractTax] = ()


@dataclass(frozen=True)
class _Price:
    """A price version's row, with its properties' stored JSON text (what tells equal properties)."""

    dimension: str
    charge_model: str
    properties: dict[str, Any]
    unit_price: Decimal
    included_quantity: Decimal
    effective_from: datetime | None
    key: str


_METRIC_COLUMNS = ("contract_id", "code", "name", "expression")
_PRICE_COLUMNS = (
    "contract_id",
    "dimension",
    "charge_model",
    "properties_text",
    "unit_price",
    "included_quantity",
    "effective_from",
)
_COUPON_COLUMNS = ("contract_id", "code", "percent_off", "amount_off", "periods")


def terms_rows(contract_ids: Sequence[int]) -> dict[int, TermsRows]:
    """Each contract's metrics, price versions and coupons, from three queries for all of them (as
    rows, not model instances: what prefetching them costs per contract is most of a batch's reads).
    Their terms share what is equal: a price version's charge terms and a metric's parse are validated
    once per batch, not once per contract."""
    grouped: dict[int, tuple[list[Any], list[Any], list[Any]]] = {pk: ([], [], []) for pk in contract_ids}
    metrics = ContractMetric.objects.filter(contract_id__in=contract_ids)
    prices = ContractPrice.objects.filter(contract_id__in=contract_ids).annotate(
        properties_text=Cast("properties", TextField())
    )
    coupons = Coupon.objects.filter(contract_id__in=contract_ids)
    taxes: dict[int, list[ContractTax]] = {}
    for tax in ContractTax.objects.filter(contract_id__in=contract_ids):
        taxes.setdefault(tax.contract_id, []).append(tax)
    for row in metrics.values_list(*_METRIC_COLUMNS, named=True):
        grouped[row.contract_id][0].append(row)
    parsed: dict[str, dict[str, Any]] = {}
    for pk, dimension, model, text, unit_price, included, effective_from in prices.values_list(
        *_PRICE_COLUMNS
    ):
        if text not in parsed:
            parsed[text] = json.loads(text)
        grouped[pk][1].append(
            _Price(dimension, model, parsed[text], unit_price, included, effective_from, text)
        )
    for row in coupons.values_list(*_COUPON_COLUMNS, named=True):
        grouped[row.contract_id][2].append(row)
    shared: dict[Any, Any] = {}
    return {pk: TermsRows(*parts, shared=shared, taxes=taxes.get(pk, [])) for pk, parts in grouped.items()}


def terms_of(
    contract: Contract,
    start: datetime | None = None,
    end: datetime | None = None,
    *,
    rows: TermsRows | None = None,
) -> Terms:
    """The contract's current terms, validated (TermsError on anything that cannot be billed). With a
    period [start, end): only the price versions that apply in it. `rows`: the contract's metrics,
    prices and coupons already read (`terms_rows`); else they are read from the contract."""
    if rows is None:
        rows = TermsRows(
            list(contract.metrics.all()),
            list(contract.prices.all()),
            list(contract.coupons.all()),
            taxes=list(contract.taxes.all()),
        )
    shared = rows.shared if rows.shared is not None else {}
    metric_rows = rows.metrics
    metrics = {m.code: m.expression for m in metric_rows}
    for code, expression in metrics.items():
        if code in DIMENSION_LABELS:
            raise TermsError("metric_shadows_dimension", f"Metric code {code!r} is a built-in dimension.", {})
        if ("metric", expression) not in shared:
            parse_metric(expression)
            shared["metric", expression] = True
    labels = DIMENSION_LABELS
    names = {m.code: m.name for m in metric_rows}
    events = priced_events(contract, (p.dimension for p in rows.prices), set(metrics))
    names |= {unit: event_unit_label(unit) for unit in events}
    codes = frozenset(metrics) | frozenset(events)
    charges = []
    ordered = sorted(rows.prices, key=lambda p: (p.dimension, p.effective_from or _BEGINNING))
    for price in _in_period(ordered, start, end):
        label = str(labels.get(price.dimension) or names.get(price.dimension, price.dimension))
        if not isinstance(price, _Price):  # a model instance: no stored JSON text to tell it by
            charges.append(_charge_terms(price, label, codes))
            continue
        key: tuple[Any, ...] = (price.dimension, price.charge_model, price.key, price.unit_price)
        key = (*key, price.included_quantity, price.effective_from, label, codes)
        if (charge := shared.get(key)) is None:
            charge = shared[key] = _charge_terms(price, label, codes)
        charges.append(charge)
    order = {d: i for i, d in enumerate([*DIMENSION_CODES, *sorted(metrics), *sorted(events)])}
    charges.sort(key=lambda c: order[c.dimension])  # stable: versions stay oldest first
    if contract.currency not in MINOR_UNITS:
        raise TermsError("unsupported_currency", f"Unsupported currency {contract.currency!r}.", {})
    catalogue = None
    if contract.price_by_catalogue:
        priced = sorted({c.dimension for c in charges if c.dimension in CATALOGUE_DIMENSIONS})
        if priced:
            raise catalogue_priced(priced)
        catalogue = CatalogueTerms(decimal_text(contract.catalogue_adjustment))
    coupons = [
        CouponTerms(
            code=c.code,
            percent_off=None if c.percent_off is None else decimal_text(c.percent_off),
            amount_off=None if c.amount_off is None else decimal_text(c.amount_off),
            periods=c.periods,
        )
        for c in rows.coupons
    ]
    return Terms(
        contract=contract.code,
        currency=contract.currency,
        base_fee=decimal_text(contract.base_fee),
        base_fee_timing=contract.base_fee_timing,
        minimum_commitment=decimal_text(contract.minimum_commitment),
        tax_rate=decimal_text(contract.tax_rate),
        tax_inclusive=contract.tax_inclusive,
        credit_order=list(contract.credit_order or []),
        charges=charges,
        metrics=metrics,
        coupons=coupons,
        taxes=[TaxTerms(t.code, t.name, decimal_text(t.rate), tuple(t.applies_to)) for t in rows.taxes],
        catalogue=catalogue,
        events=events,
        starts_at=contract.starts_at.isoformat(),
        ends_at=contract.ends_at.isoformat() if contract.ends_at else "",
        outcome_window_hours=contract.outcome_window_hours,
        outcome_on_expiry=contract.outcome_on_expiry,
        outcome_rule=contract.outcome_rule,
    )
