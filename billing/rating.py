"""Rating: a period's measured usage × contract terms → invoice lines and totals. Pure: no database access.

Rounding rule: every line's amount is rounded once, half up, to the currency's minor unit (CNY 0.01,
JPY 1); the subtotal is the sum of the rounded lines; tax is one more rounding of subtotal × rate
(exclusive) or subtotal × rate / (1 + rate) (inclusive, already in the prices). A contract with taxes
of its own (several, per line) is taxed line by line, with the rule of `billing.taxes`.

A dimension whose price changed within the period gets one line per price version, rated from the
usage of its segment (`rate_versions`; the rules are in docs/billing.md, "Price changes within a
contract").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from clickhouse_store.queries.billing import CatalogueDay
from common.money import round_money
from common.periods import next_period_bounds
from pricing.charge_models import ChargeModel, Percentage, Volume
from pricing.dimensions import DIMENSION_CODES, DIMENSION_LABELS

from .catalogue_rating import MILLION, catalogue_charges
from .taxes import LineTax, TaxedLine, line_taxes
from .terms import ChargeTerms, Terms

ZERO = Decimal(0)


@dataclass(frozen=True)
class RatedLine:
    dimension: str
    description: str
    quantity: Decimal
    unit_price: Decimal
    amount: Decimal
    kind: str = "usage"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SegmentUsage:
    """The usage of [start, end), a part of the period between price changes."""

    start: datetime
    end: datetime
    quantities: dict[str, Decimal]

    def to_json(self) -> dict[str, Any]:
        """As kept in an invoice's frozen terms (`segments`): the quantities each version rated."""
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "quantities": {k: str(v) for k, v in self.quantities.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SegmentUsage:
        return cls(
            datetime.fromisoformat(data["start"]),
            datetime.fromisoformat(data["end"]),
            {k: Decimal(v) for k, v in data["quantities"].items()},
        )


class BilledEvent(NamedTuple):
    """A billable business event (billing.business_events): its id, the records it is made of (by start),
    and when it started (the price segment that bills it)."""

    event_id: str
    records: tuple[str, ...]
    started: datetime

    def as_json(self) -> dict[str, object]:
        """As an invoice line states it (`details.events`): the id and the record ids, sorted."""
        return {"event_id": self.event_id, "records": sorted(self.records)}


@dataclass(frozen=True)
class PeriodUsage:
    record_count: int
    quantities: dict[str, Decimal]
    values: dict[str, Decimal] = field(default_factory=dict)
    excluded: dict[str, Any] = field(default_factory=dict)  # what exclusions left out, and why
    segments: tuple[SegmentUsage, ...] = ()  # in time order, when prices change within the period
    # Tokens per model and day, for a contract priced by the catalogue; None: not measured.
    catalogue: tuple[CatalogueDay, ...] | None = None
    # Per business-event unit the contract prices, its billable events (their count is the quantity).
    events: dict[str, tuple[BilledEvent, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class RatedInvoice:
    lines: list[RatedLine]
    subtotal: Decimal
    tax: Decimal
    total: Decimal


def rate_charge(charge: ChargeTerms, quantity: Decimal, value: Decimal, currency: str) -> RatedLine:
    """One usage line: the quota comes off first, the charge model prices the rest. Above a quota, a
    percentage charge takes its share of the billable units' part of the value (pro rata)."""
    included = Decimal(charge.included_quantity)
    billable = max(quantity - included, ZERO)
    if included and quantity:
        value = value * billable / quantity
    priced = charge.model().charge(billable, value)
    details: dict[str, Any] = {"charge_model": charge.charge_model}
    if included:
        details["included"] = str(included)
        details["billable"] = str(billable)
    if priced.bound_applied:
        details["bound"] = priced.bound_applied
    if charge.charge_model == "percentage":
        details["value"] = str(value)
    if charge.charge_model == "per_unit":
        unit_price = Decimal(str(charge.properties["unit_price"]))
    else:  # the effective average price per billable unit, for display
        unit_price = (priced.amount / billable).quantize(Decimal("1E-8")) if billable else ZERO
    return RatedLine(
        dimension=charge.dimension,
        description=charge.label,
        quantity=quantity,
        unit_price=unit_price,
        amount=round_money(priced.amount, currency),
        details=details,
    )


def rate_versions(
    versions: list[ChargeTerms],
    usage: PeriodUsage,
    start: datetime,
    end: datetime,
    currency: str,
    additive: bool = True,
) -> list[RatedLine]:
    """The lines of one dimension: one line as ever when a single version prices the whole period,
    else one per version in effect, each over its segment of the period (usage before a dimension's
    first version is not billed). A metric whose quantity does not add up over parts of the period
    (`additive` false: a period max, a unique count, a latest value) is one figure of the whole period:
    the version in effect at the period's end prices it, in one line. The rules for the others:

    - the period's included quantity is the newest version's (the one in effect at the period end),
      consumed in time order: the earliest usage is free first;
    - tiers (graduated, volume, package) run on the period's cumulative billable quantity in time
      order: a later segment continues where the earlier one left off on the tier ladder, priced by
      its own version's tiers; a volume tier is the one the period's total falls in;
    - the newest version's period minimum/maximum bounds the dimension's total, in one more line.
    """
    spans = _spans(versions, start, end)
    if not spans:
        return []
    dimension = versions[0].dimension
    priced = version_quantities(versions, usage, start, end, additive)
    if not priced.segmented:
        return [rate_charge(spans[-1][0], priced.quantities[0], usage.values.get(dimension, ZERO), currency)]
    quantities = list(priced.quantities)
    newest = spans[-1][0]
    included = Decimal(newest.included_quantity)
    total = sum(quantities, ZERO)
    billable_total = max(total - included, ZERO)
    value = usage.values.get(dimension, ZERO)
    lines, rated, used = [], ZERO, ZERO
    for (charge, begin, finish), quantity in zip(spans, quantities, strict=True):
        first = max(used - included, ZERO)  # the segment's first tier position
        used += quantity
        billable = max(used - included, ZERO) - first
        share = value * billable / total if total else ZERO
        amount = _range_amount(charge.model(), first, first + billable, billable_total, share)
        rated += amount
        details: dict[str, Any] = {
            "charge_model": charge.charge_model,
            "effective_from": charge.effective_from,
            "segment_start": begin.isoformat(),
            "segment_end": finish.isoformat(),
            "billable": str(billable),
        }
        if included:
            details["included"] = str(quantity - billable)
            details["period_included"] = str(included)
        if charge.charge_model in ("graduated", "volume", "package"):
            details["tier_position"] = str(first)
        if charge.charge_model == "per_unit":
            unit_price = Decimal(str(charge.properties["unit_price"]))
        else:
            unit_price = (amount / billable).quantize(Decimal("1E-8")) if billable else ZERO
        lines.append(
            RatedLine(
                dimension=dimension,
                description=f"{charge.label} ({begin:%Y-%m-%d %H:%M} – {finish:%Y-%m-%d %H:%M} UTC)",
                quantity=quantity,
                unit_price=unit_price,
                amount=round_money(amount, currency),
                details=details,
            )
        )
    bound = _bound_line(newest, rated, lines, currency)
    return [*lines, bound] if bound is not None else lines


@dataclass(frozen=True)
class VersionQuantities:
    """What `rate_versions` rates a dimension's usage at: the versions in effect (`effective_from`,
    oldest first) with the quantity each prices; `segmented` false: one line over the whole period, at
    the one version given."""

    segmented: bool
    effective_from: tuple[str, ...]
    quantities: tuple[Decimal, ...]


def version_quantities(
    versions: list[ChargeTerms], usage: PeriodUsage, start: datetime, end: datetime, additive: bool = True
) -> VersionQuantities:
    """The quantities `rate_versions` prices, per version in effect (none when no version is)."""
    spans = _spans(versions, start, end)
    if not spans:
        return VersionQuantities(False, (), ())
    dimension = versions[0].dimension
    if not additive or (len(spans) == 1 and spans[0][1:] == (start, end)):
        newest = spans[-1][0]
        return VersionQuantities(False, (newest.effective_from,), (usage.quantities.get(dimension, ZERO),))
    return VersionQuantities(
        True,
        tuple(charge.effective_from for charge, _, _ in spans),
        tuple(_segment_quantity(usage, dimension, begin, finish) for _, begin, finish in spans),
    )


def _spans(
    versions: list[ChargeTerms], start: datetime, end: datetime
) -> list[tuple[ChargeTerms, datetime, datetime]]:
    """Each version (oldest first) with the part of [start, end) it applies to; none for the others."""
    spans = []
    for k, charge in enumerate(versions):
        begin = max(start, charge.starts() or start)
        following = versions[k + 1].starts() if k + 1 < len(versions) else None
        finish = min(end, following) if following is not None else end
        if begin < finish:
            spans.append((charge, begin, finish))
    return spans


def _segment_quantity(usage: PeriodUsage, dimension: str, begin: datetime, finish: datetime) -> Decimal:
    """The dimension's usage in [begin, finish), from the measured segments (which must split there)."""
    if not any(s.start == begin for s in usage.segments) or not any(s.end == finish for s in usage.segments):
        raise ValueError(
            f"Usage is not measured per price segment at {begin.isoformat()}–{finish.isoformat()}."
        )
    return sum(
        (s.quantities.get(dimension, ZERO) for s in usage.segments if begin <= s.start and s.end <= finish),
        ZERO,
    )


def _range_amount(
    model: ChargeModel, first: Decimal, last: Decimal, total: Decimal, value: Decimal
) -> Decimal:
    """The unrounded amount of the billable units at tier positions (first, last] of the period's
    `total`, without the model's period bounds."""
    if last <= first:
        return ZERO
    if isinstance(model, Percentage):
        return model.raw_amount(last - first, value)
    if isinstance(model, Volume):  # the period's total picks the tier; its flat fee is shared pro rata
        tier = next(t for t in model.tiers if t.up_to is None or total <= t.up_to)
        return (last - first) * tier.unit_price + tier.flat_fee * (last - first) / total
    return model.raw_amount(last, ZERO) - model.raw_amount(first, ZERO)


def _bound_line(
    newest: ChargeTerms, rated: Decimal, lines: list[RatedLine], currency: str
) -> RatedLine | None:
    """The newest version's period minimum or maximum, applied to the dimension's total over its
    segments: the difference to the bound, as one more line."""
    model = newest.model()
    if model.minimum is not None and rated < model.minimum:
        kind, bound = "minimum", model.minimum
    elif model.maximum is not None and rated > model.maximum:
        kind, bound = "maximum", model.maximum
    else:
        return None
    amount = round_money(bound, currency) - sum((line.amount for line in lines), ZERO)
    return RatedLine(
        dimension=newest.dimension,
        description=f"{newest.label}: period {kind} {bound} ({round_money(rated, currency)} rated)",
        quantity=ZERO,
        unit_price=ZERO,
        amount=amount,
        details={"bound": kind, "rated": str(rated)},
    )


def rate_usage(
    quantities: Mapping[str, Decimal], prices: Mapping[str, Decimal], currency: str
) -> list[RatedLine]:
    """Per-unit prices only: one line per priced dimension, in the order dimensions are declared."""
    return [
        rate_charge(
            ChargeTerms(d, DIMENSION_LABELS[d], "per_unit", {"unit_price": str(prices[d])}),
            quantities.get(d, ZERO),
            ZERO,
            currency,
        )
        for d in DIMENSION_CODES
        if d in prices
    ]


def catalogue_lines(terms: Terms, usage: PeriodUsage) -> list[RatedLine]:
    """The usage lines of a contract priced by the LLM price catalogue (`billing.catalogue_rating`):
    one per model, catalogue version and token kind, quantities per million tokens."""
    if terms.catalogue is None:
        return []
    return [
        RatedLine(
            dimension=charge.dimension,
            description=charge.description(),
            quantity=Decimal(charge.tokens) / MILLION,
            unit_price=charge.unit_price,
            amount=charge.amount,
            details={"catalogue": charge.details(terms.catalogue.adjustment)},
        )
        for charge in catalogue_charges(terms.catalogue, usage.catalogue or (), terms.currency)
    ]


def coverage(terms: Terms, start: datetime, end: datetime) -> Decimal:
    """The share of [start, end) the contract runs (1 for a whole period; prorates mid-period changes)."""
    begin = max(start, datetime.fromisoformat(terms.starts_at)) if terms.starts_at else start
    finish = min(end, datetime.fromisoformat(terms.ends_at)) if terms.ends_at else end
    if finish <= begin:
        return ZERO
    return Decimal(int((finish - begin).total_seconds())) / Decimal(int((end - start).total_seconds()))


def _fee_line(terms: Terms, start: datetime, end: datetime, note: str) -> RatedLine | None:
    fee, share = Decimal(terms.base_fee), coverage(terms, start, end)
    if not fee or not share:
        return None
    description = f"Base fee {start:%Y-%m}{note}" + ("" if share == 1 else f" (prorated {share:.4f})")
    return RatedLine(
        dimension="",
        description=description,
        quantity=share,
        unit_price=fee,
        amount=round_money(fee * share, terms.currency),
        kind="base_fee",
        details={"period_start": start.isoformat(), "share": str(share)},
    )


def base_fee_lines(terms: Terms, start: datetime, end: datetime) -> list[RatedLine]:
    """In arrears: the closed period's fee. In advance: the next period's fee, plus the closed period's
    when the contract started in it (it had no earlier invoice to bill it in advance)."""
    if terms.base_fee_timing == "arrears":
        periods = [(start, end, "")]
    else:
        periods = [(*next_period_bounds(end), " (in advance)")]
        if terms.starts_at and datetime.fromisoformat(terms.starts_at) >= start:
            periods.insert(0, (start, end, " (in advance, first period)"))
    return [line for s, e, note in periods if (line := _fee_line(terms, s, e, note)) is not None]


def rate_period(
    terms: Terms,
    usage: PeriodUsage,
    start: datetime,
    end: datetime,
    *,
    coupons_used: Mapping[str, int] | None = None,
    adjustments: list[RatedLine] | None = None,
    credits: list[RatedLine] | None = None,
) -> RatedInvoice:
    """All lines of one period's invoice: usage, late-usage adjustments, base fee, commitment true-up,
    coupon discounts, SLA service credits (negative); then tax, on the subtotal after the credits.
    `coupons_used` counts earlier invoices each coupon discounted."""
    currency = terms.currency
    lines = [
        line
        for dimension, versions in terms.versions().items()
        for line in rate_versions(versions, usage, start, end, currency, terms.additive(dimension))
    ]
    lines += catalogue_lines(terms, usage)
    lines += adjustments or []
    fees = base_fee_lines(terms, start, end)
    lines += fees
    committed = round_money(Decimal(terms.minimum_commitment) * coverage(terms, start, end), currency)
    consumed = sum((line.amount for line in lines if line.kind in ("usage", "base_fee")), ZERO)
    if committed > consumed:
        lines.append(
            RatedLine(
                dimension="",
                description=f"Minimum commitment true-up ({committed} committed, {consumed} used)",
                quantity=Decimal(1),
                unit_price=committed - consumed,
                amount=committed - consumed,
                kind="commitment",
                details={"committed": str(committed), "consumed": str(consumed)},
            )
        )
    lines += _discounts(terms, lines, coupons_used or {})
    lines += credits or []
    subtotal = sum((line.amount for line in lines), ZERO)
    if terms.taxes:  # per line, several per line (billing.taxes); each line keeps its taxes in details
        taxed, tax = line_taxes(
            terms.taxes,
            [TaxedLine(x.amount, x.kind, x.dimension) for x in lines],
            terms.tax_inclusive,
            currency,
        )
        lines = [_with_taxes(line, found) for line, found in zip(lines, taxed, strict=True)]
    else:
        rate = Decimal(terms.tax_rate)
        tax = round_money(subtotal * (rate / (1 + rate) if terms.tax_inclusive else rate), currency)
    total = subtotal if terms.tax_inclusive else subtotal + tax
    return RatedInvoice(lines=lines, subtotal=subtotal, tax=tax, total=total)


def _with_taxes(line: RatedLine, taxes: list[LineTax]) -> RatedLine:
    if not taxes:
        return line
    found = [{"code": t.code, "rate": str(t.rate), "amount": str(t.amount)} for t in taxes]
    return replace(line, details={**line.details, "taxes": found})


def _discounts(terms: Terms, lines: list[RatedLine], used: Mapping[str, int]) -> list[RatedLine]:
    """Coupons in the order they were added; each discounts what the earlier ones left, never below 0."""
    remaining = sum((line.amount for line in lines), ZERO)
    discounts = []
    for coupon in terms.coupons:
        if coupon.periods is not None and used.get(coupon.code, 0) >= coupon.periods:
            continue
        if coupon.percent_off is not None:
            off = round_money(remaining * Decimal(coupon.percent_off), terms.currency)
            label = f"{Decimal(coupon.percent_off) * 100:.2f} % off"
        else:
            off = min(Decimal(coupon.amount_off or 0), remaining)
            label = f"{coupon.amount_off} off"
        if off <= 0:
            continue
        remaining -= off
        discounts.append(
            RatedLine(
                dimension="",
                description=f"Coupon {coupon.code}: {label}",
                quantity=Decimal(1),
                unit_price=-off,
                amount=-off,
                kind="discount",
                details={"coupon": coupon.code},
            )
        )
    return discounts
