"""Charge models: how one dimension's period quantity becomes an amount. Pure: no database access.

Each model takes the period's billable quantity (after any included quota) and, for `percentage`, the
period's summed value field, and returns the unrounded amount; rounding happens once per invoice line.
`CHARGE_MODELS` is the one registry of kinds: each class names its `kind` and `label` and reads its
own properties (`from_properties`); `build_charge_model(kind, properties)` validates the stored
properties and picks the class, and an unknown kind raises `unknown_charge_model`. The contract price's
choices (`CHARGE_MODEL_CHOICES`) are read from the same registry.
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


Bounds = dict[str, Decimal | None]


class ChargeModel(ABC):
    kind: str
    label: str

    def __init__(self, minimum: Decimal | None = None, maximum: Decimal | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    @classmethod
    @abstractmethod
    def from_properties(cls, properties: Mapping[str, Any], bounds: Bounds) -> ChargeModel:
        """The model for stored properties, or TermsError naming what is wrong."""

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
    label = "Per unit"

    def __init__(self, unit_price: Decimal, **bounds: Decimal | None) -> None:
        super().__init__(**bounds)
        self.unit_price = unit_price

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], bounds: Bounds) -> ChargeModel:
        return cls(_decimal(properties, "unit_price") or ZERO, **bounds)

    def raw_amount(self, quantity: Decimal, value: Decimal) -> Decimal:
        return quantity * self.unit_price


class Graduated(ChargeModel):
    """Each tier prices the units that fall inside it (like income tax brackets)."""

    kind = "graduated"
    label = "Graduated tiers"

    def __init__(self, tiers: Sequence[Tier], **bounds: Decimal | None) -> None:
        super().__init__(**bounds)
        self.tiers = tuple(tiers)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], bounds: Bounds) -> ChargeModel:
        return cls(_tiers(properties), **bounds)

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
    label = "Volume tiers"

    def __init__(self, tiers: Sequence[Tier], **bounds: Decimal | None) -> None:
        super().__init__(**bounds)
        self.tiers = tuple(tiers)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], bounds: Bounds) -> ChargeModel:
        return cls(_tiers(properties), **bounds)

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
    label = "Package (per block of N)"

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

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], bounds: Bounds) -> ChargeModel:
        size = _decimal(properties, "package_size") or ZERO
        if size <= 0:
            raise TermsError(
                "invalid_package_size", "'package_size' must be positive.", {"property": "package_size"}
            )
        return cls(
            size,
            _decimal(properties, "package_price") or ZERO,
            _decimal(properties, "free_units", required=False) or ZERO,
            **bounds,
        )

    def raw_amount(self, quantity: Decimal, value: Decimal) -> Decimal:
        paid = max(quantity - self.free_units, ZERO)
        blocks = (paid / self.package_size).to_integral_value(rounding=ROUND_CEILING)
        return blocks * self.package_price


class Percentage(ChargeModel):
    """`rate` (0.15 = 15 %) of the period's summed value field, plus `fixed_fee` per unit."""

    kind = "percentage"
    label = "Percentage of value"

    def __init__(self, rate: Decimal, fixed_fee: Decimal = ZERO, **bounds: Decimal | None) -> None:
        super().__init__(**bounds)
        self.rate = rate
        self.fixed_fee = fixed_fee

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], bounds: Bounds) -> ChargeModel:
        rate = _decimal(properties, "rate") or ZERO
        if rate > 1:
            raise TermsError("invalid_rate", f"'rate' is a fraction of 1 (0.15 = 15 %), not {rate}.", {})
        return cls(rate, _decimal(properties, "fixed_fee", required=False) or ZERO, **bounds)

    def raw_amount(self, quantity: Decimal, value: Decimal) -> Decimal:
        return value * self.rate + quantity * self.fixed_fee


# The one registry of charge-model kinds, in the order the admin and the docs list them.
CHARGE_MODELS: dict[str, type[ChargeModel]] = {
    model.kind: model for model in (PerUnit, Graduated, Volume, Package, Percentage)
}
KINDS: tuple[str, ...] = tuple(CHARGE_MODELS)
CHARGE_MODEL_CHOICES: list[tuple[str, str]] = [(kind, model.label) for kind, model in CHARGE_MODELS.items()]
PER_UNIT = PerUnit.kind


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
    bounds: Bounds = {
        "minimum": _decimal(properties, "minimum", required=False),
        "maximum": _decimal(properties, "maximum", required=False),
    }
    if (
        bounds["minimum"] is not None
        and bounds["maximum"] is not None
        and bounds["minimum"] > bounds["maximum"]
    ):
        raise TermsError("invalid_bounds", "The period minimum exceeds the maximum.", {})
    model = CHARGE_MODELS.get(kind)
    if model is None:
        raise TermsError(
            "unknown_charge_model",
            f"Unknown charge model {kind!r}; use one of {', '.join(KINDS)}.",
            {"kind": kind},
        )
    return model.from_properties(properties, bounds)
