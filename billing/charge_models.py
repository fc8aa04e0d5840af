"""Charge models: how one dimension's period quantity becomes an amount. Pure: no database access.

Each model takes the period's billable quantity (after any included quota) and, for `percentage`, the
period's summed value field, and returns the unrounded amount; rounding happens once per invoice line.
`build_charge_model(kind, properties)` validates the stored properties and picks the class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from .errors import TermsError

ZERO = Decimal(0)


@dataclass(frozen=True)
class Tier:
    """Units up to and including `up_to` (None: no upper bound) at `unit_price`, plus `flat_fee` once."""

    up_to: Decimal | None
    unit_price: Decimal
    flat_fee: Decimal = ZERO


@dataclass(frozen=True)
class Charge:
    amount: Decimal
    # "minimum" or "maximum" when the per-period bound replaced the model's amount.
    bound_applied: str = ""


class ChargeModel(ABC):
    kind: str

    def __init__(self, minimum: Decimal | None = None, maximum: Decimal | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    @abstractmethod
    def raw_amount(self, quantity: Decimal, value: Decimal) -> Decimal: ...

    def charge(self, quantity: Decimal, value: Decimal = ZERO) -> Charge:
        """The model's amount, raised to the period minimum or capped at the period maximum."""
        amount = self.raw_amount(quantity, value)
        if self.minimum is not None and amount < self.minimum:
            return Charge(self.minimum, "minimum")
        if self.maximum is not None and amount > self.maximum:
            return Charge(self.maximum, "maximum")
        return Charge(amount)


class PerUnit(ChargeModel):
    kind = "per_unit"

    def __init__(self, unit_price: Decimal, **bounds: Decimal | None) -> None:
        super().__init__(**bounds)
        self.unit_price = unit_price

    def raw_amount(self, quantity: Decimal, value: Decimal) -> Decimal:
        return quantity * self.unit_price


class Graduated(ChargeModel):
    """Each tier prices the units that fall inside it (like income tax brackets)."""

    kind = "graduated"

    def __init__(self, tiers: Sequence[Tier], **bounds: Decimal | None) -> None:
        super().__init__(**bounds)
        self.tiers = tuple(tiers)

    def raw_amount(self, quantity: Decimal, value: Decimal) -> Decimal:
        amount, lower = ZERO, ZERO
        for tier in self.tiers:
            if quantity <= lower:
                break
            upper = quantity if tier.up_to is None else min(quantity, tier.up_to)
            amount += (upper - lower) * tier.unit_price + tier.flat_fee
            if tier.up_to is None:
                break
            lower = tier.up_to
        return amount


class Volume(ChargeModel):
    """The tier the whole quantity falls into prices every unit."""

    kind = "volume"

    def __init__(self, tiers: Sequence[Tier], **bounds: Decimal | None) -> None:
        super().__init__(**bounds)
        self.tiers = tuple(tiers)

    def raw_amount(self, quantity: Decimal, value: Decimal) -> Decimal:
        if quantity <= 0:
            return ZERO
        for tier in self.tiers:
            if tier.up_to is None or quantity <= tier.up_to:
                return quantity * tier.unit_price + tier.flat_fee
        raise AssertionError("validated tiers end unbounded")


class Package(ChargeModel):
    """`package_price` per started block of `package_size` units; the first `free_units` are free."""

    kind = "package"

    def __init__(
        self,
        package_size: Decimal,
        package_price: Decimal,
        free_units: Decimal = ZERO,
        **bounds: Decimal | None,
    ) -> None:
        super().__init__(**bounds)
        self.package_size = package_size
        self.package_price = package_price
        self.free_units = free_units

    def raw_amount(self, quantity: Decimal, value: Decimal) -> Decimal:
        paid = max(quantity - self.free_units, ZERO)
        blocks = (paid / self.package_size).to_integral_value(rounding=ROUND_CEILING)
        return blocks * self.package_price


class Percentage(ChargeModel):
    """`rate` (0.15 = 15 %) of the period's summed value field, plus `fixed_fee` per unit."""

    kind = "percentage"

    def __init__(self, rate: Decimal, fixed_fee: Decimal = ZERO, **bounds: Decimal | None) -> None:
        super().__init__(**bounds)
        self.rate = rate
        self.fixed_fee = fixed_fee

    def raw_amount(self, quantity: Decimal, value: Decimal) -> Decimal:
        return value * self.rate + quantity * self.fixed_fee


KINDS = ("per_unit", "graduated", "volume", "package", "percentage")


def _decimal(properties: Mapping[str, Any], key: str, *, required: bool = True) -> Decimal | None:
    raw = properties.get(key)
    if raw is None:
        if required:
            raise TermsError("missing_property", f"The charge needs {key!r}.", {"property": key})
        return None
    try:
        number = Decimal(str(raw))
    except InvalidOperation:
        raise TermsError("invalid_number", f"{key!r} is not a number: {raw!r}.", {"property": key}) from None
    if not number.is_finite():
        raise TermsError("invalid_number", f"{key!r} must be finite.", {"property": key})
    if number < 0:
        raise TermsError("negative_price", f"{key!r} must not be negative ({number}).", {"property": key})
    return number


def _tiers(properties: Mapping[str, Any]) -> list[Tier]:
    raw = properties.get("tiers")
    if not isinstance(raw, list) or not raw:
        raise TermsError(
            "missing_property", "Tiered charges need a non-empty 'tiers' list.", {"property": "tiers"}
        )
    tiers: list[Tier] = []
    previous = ZERO
    for index, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise TermsError("invalid_tier", f"Tier {index} is not an object.", {"tier": index})
        up_to = _decimal(item, "up_to", required=False)
        last = index == len(raw) - 1
        if up_to is None and not last:
            raise TermsError(
                "overlapping_tiers", f"Only the last tier may be unbounded (tier {index}).", {"tier": index}
            )
        if up_to is not None and up_to <= previous:
            raise TermsError(
                "overlapping_tiers",
                f"Tier {index} ends at {up_to}, not above the previous tier's end {previous}.",
                {"tier": index},
            )
        if last and up_to is not None:
            raise TermsError("unbounded_last_tier", "The last tier must have no 'up_to'.", {"tier": index})
        tiers.append(
            Tier(
                up_to,
                _decimal(item, "unit_price") or ZERO,
                _decimal(item, "flat_fee", required=False) or ZERO,
            )
        )
        previous = up_to if up_to is not None else previous
    return tiers


def build_charge_model(kind: str, properties: Mapping[str, Any]) -> ChargeModel:
    """The charge model for stored terms, or TermsError naming what is wrong."""
    bounds = {
        "minimum": _decimal(properties, "minimum", required=False),
        "maximum": _decimal(properties, "maximum", required=False),
    }
    if (
        bounds["minimum"] is not None
        and bounds["maximum"] is not None
        and bounds["minimum"] > bounds["maximum"]
    ):
        raise TermsError("invalid_bounds", "The period minimum exceeds the maximum.", {})
    if kind == "per_unit":
        return PerUnit(_decimal(properties, "unit_price") or ZERO, **bounds)
    if kind == "graduated":
        return Graduated(_tiers(properties), **bounds)
    if kind == "volume":
        return Volume(_tiers(properties), **bounds)
    if kind == "package":
        size = _decimal(properties, "package_size") or ZERO
        if size <= 0:
            raise TermsError(
                "invalid_package_size", "'package_size' must be positive.", {"property": "package_size"}
            )
        return Package(
            size,
            _decimal(properties, "package_price") or ZERO,
            _decimal(properties, "free_units", required=False) or ZERO,
            **bounds,
        )
    if kind == "percentage":
        rate = _decimal(properties, "rate") or ZERO
        if rate > 1:
            raise TermsError("invalid_rate", f"'rate' is a fraction of 1 (0.15 = 15 %), not {rate}.", {})
        return Percentage(rate, _decimal(properties, "fixed_fee", required=False) or ZERO, **bounds)
    raise TermsError(
        "unknown_charge_model",
        f"Unknown charge model {kind!r}; use one of {', '.join(KINDS)}.",
        {"kind": kind},
    )
