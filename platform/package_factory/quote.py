"""The factory's proposed base fee, by the design's formula: (hardware depreciation + operations cost)
× margin factor (default 1.3). The cost is a month of the declared events at the capability's measured
compute per event (probe.py) on the host class's cost profile (catalog.HostCostProfile): hardware is its
depreciation and power per hour, operations its operations per hour. The quote keeps every term, so the
customer sees how the fee was computed before accepting or changing it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from catalog.models import HostCostProfile
from common.money import round_money

from .errors import FactoryError

SECONDS_PER_HOUR = Decimal(3600)
COST_PLACES = Decimal("1e-10")  # the quote's exact terms, before the fee is rounded to the currency


@dataclass(frozen=True)
class Quote:
    currency: str
    host_class: str
    seconds_per_event: Decimal
    events_per_month: int
    hardware_per_hour: Decimal
    operations_per_hour: Decimal
    hardware: Decimal
    operations: Decimal
    margin_factor: Decimal
    proposed_base_fee: Decimal
    base_fee: Decimal
    base_fee_source: str  # "proposed" or "customer"

    @property
    def formula(self) -> str:
        return (
            f"({self.hardware} + {self.operations}) × {self.margin_factor} = {self.proposed_base_fee} "
            f"{self.currency}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            key: str(value) if isinstance(value, Decimal) else value for key, value in asdict(self).items()
        } | {"formula": self.formula}


def cost_profile(host_class: str) -> HostCostProfile:
    """The named profile, or the only one there is; FactoryError naming the choices otherwise."""
    profiles = list(HostCostProfile.objects.order_by("host_class"))
    if host_class:
        for profile in profiles:
            if profile.host_class == host_class:
                return profile
    elif len(profiles) == 1:
        return profiles[0]
    names = [p.host_class for p in profiles]
    if not profiles:
        raise FactoryError(
            "no_cost_profile", "No host cost profile exists to quote a base fee on; staff add one first.", {}
        )
    raise FactoryError(
        "host_class_required" if not host_class else "host_class_not_found",
        f"Name the host class to quote the base fee on: one of {', '.join(names)}.",
        {"field": "host_class", "host_classes": names},
    )


def quote_base_fee(
    profile: HostCostProfile,
    *,
    currency: str,
    seconds_per_event: Decimal,
    events_per_month: int,
    margin_factor: Decimal,
    base_fee: Decimal | None,
) -> Quote:
    if profile.currency != currency:
        raise FactoryError(
            "cost_currency_mismatch",
            f"Host class {profile.host_class} is costed in {profile.currency}; the prices are in {currency}.",
            {"field": "prices.currency", "cost_currency": profile.currency},
        )
    hours = seconds_per_event * events_per_month / SECONDS_PER_HOUR
    hardware_per_hour = profile.depreciation_per_hour + profile.power_per_hour
    hardware = hours * hardware_per_hour
    operations = hours * profile.operations_per_hour
    proposed = round_money((hardware + operations) * margin_factor, currency)
    if base_fee is not None and round_money(base_fee, currency) != base_fee:
        raise FactoryError(
            "invalid_spec",
            f"`prices.base_fee` has more decimals than {currency} allows.",
            {"field": "prices.base_fee"},
        )
    chosen = proposed if base_fee is None else base_fee
    return Quote(
        currency=currency,
        host_class=profile.host_class,
        seconds_per_event=seconds_per_event,
        events_per_month=events_per_month,
        hardware_per_hour=hardware_per_hour,
        operations_per_hour=profile.operations_per_hour,
        hardware=hardware.quantize(COST_PLACES),
        operations=operations.quantize(COST_PLACES),
        margin_factor=margin_factor,
        proposed_base_fee=proposed,
        base_fee=chosen,
        base_fee_source="proposed" if base_fee is None else "customer",
    )
