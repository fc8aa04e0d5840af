"""Money is Decimal with an explicit ISO 4217 currency; amounts round to the currency's minor unit."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from django.core.exceptions import ValidationError

DEFAULT_CURRENCY = "CNY"

# ISO 4217 minor units of the currencies contracts may be written in.
MINOR_UNITS: dict[str, int] = {
    "CNY": 2,
    "USD": 2,
    "EUR": 2,
    "GBP": 2,
    "HKD": 2,
    "SGD": 2,
    "JPY": 0,
    "KRW": 0,
}

CURRENCY_CHOICES = [(code, code) for code in sorted(MINOR_UNITS)]


def validate_currency(code: str) -> None:
    if code not in MINOR_UNITS:
        raise ValidationError(f"Unsupported currency {code!r}; supported: {', '.join(sorted(MINOR_UNITS))}.")


def round_money(amount: Decimal, currency: str) -> Decimal:
    """Round half up to the currency's minor unit (0.005 CNY → 0.01)."""
    exponent = Decimal(1).scaleb(-MINOR_UNITS[currency])
    return amount.quantize(exponent, rounding=ROUND_HALF_UP)
