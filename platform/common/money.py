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


def unit_price_places(price: Decimal, currency: str) -> int:
    """Decimal places to print a unit price with: at least the currency's minor unit (`0.80`, not `0.8`),
    more where the price has them (`0.0002`), never trailing zeros beyond that."""
    significant = max(0, -int(price.normalize().as_tuple().exponent))
    return max(MINOR_UNITS[currency], significant)


def format_unit_price(price: Decimal, currency: str) -> str:
    """A unit price as plain digits (`0.80`, `0.0002`), for the PDF and the CLI."""
    return f"{price:.{unit_price_places(price, currency)}f}"
