"""The customer's declaration of a package: read from JSON, merged over an industry template, checked.

Every refusal is a FactoryError `invalid_spec` naming the field (`details.field`, a dotted path).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from accounts.validators import SLUG_CODE
from common.money import CURRENCY_CHOICES

from .errors import FactoryError
from .onnx_model import DTYPE_NAMES, TensorSpec

CURRENCIES = tuple(code for code, _ in CURRENCY_CHOICES)
DEFAULT_MARGIN = Decimal("1.3")
MAX_TENSORS = 32
MAX_RANK = 8


@dataclass(frozen=True)
class SlaTerms:
    timeout_ms: int
    p99_ms: int
    availability_percent: Decimal


@dataclass(frozen=True)
class PriceTerms:
    currency: str
    per_event: Decimal
    included_events: int
    events_per_month: int
    margin_factor: Decimal
    base_fee: Decimal | None  # None: take the factory's proposal


@dataclass(frozen=True)
class PackageSpec:
    package_code: str
    package_name: str
    unit: str
    description: str
    capability_code: str
    capability_name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    acceptance_rule: str
    sla: SlaTerms
    prices: PriceTerms
    host_class: str


def merged(template: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any]:
    """The template's values with the declared ones over them, object by object (lists are replaced)."""
    result = dict(template)
    for key, value in declared.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def parse_spec(data: Any) -> PackageSpec:
    if not isinstance(data, dict):
        raise _invalid("", "The declaration is a JSON object.")
    package = _object(data, "package")
    capability = _object(data, "capability")
    sla = _object(data, "sla")
    prices = _object(data, "prices")
    return PackageSpec(
        package_code=_slug(package, "package.code"),
        package_name=_text(package, "package.name", 200),
        unit=_slug(package, "package.unit"),
        description=_text(package, "package.description", 2000, required=False),
        capability_code=_slug(capability, "capability.code"),
        capability_name=_text(capability, "capability.name", 200),
        inputs=_tensors(capability, "capability.inputs"),
        outputs=_tensors(capability, "capability.outputs"),
        acceptance_rule=_text(capability, "capability.acceptance_rule", 1000, required=False),
        sla=SlaTerms(
            timeout_ms=_integer(sla, "sla.timeout_ms", 1, 600_000),
            p99_ms=_integer(sla, "sla.p99_ms", 1, 600_000),
            availability_percent=_required(
                _decimal(sla, "sla.availability_percent", Decimal(0), Decimal(100), open_=True),
                "sla.availability_percent",
            ),
        ),
        prices=PriceTerms(
            currency=_currency(prices),
            per_event=_required(_decimal(prices, "prices.per_event", Decimal(0), None), "prices.per_event"),
            included_events=_integer(prices, "prices.included_events", 0, 10**12, default=0),
            events_per_month=_integer(prices, "prices.events_per_month", 1, 10**12),
            margin_factor=_decimal(prices, "prices.margin_factor", Decimal(0), Decimal(100), open_=True)
            or DEFAULT_MARGIN,
            base_fee=_decimal(prices, "prices.base_fee", Decimal(0), None),
        ),
        host_class=_text(data, "host_class", 64, required=False),
    )


def _invalid(field: str, message: str) -> FactoryError:
    return FactoryError("invalid_spec", message, {"field": field})


def _leaf(field: str) -> str:
    return field.rsplit(".", 1)[-1]


def _object(data: dict[str, Any], field: str) -> dict[str, Any]:
    value = data.get(field)
    if not isinstance(value, dict):
        raise _invalid(field, f"`{field}` is a JSON object.")
    return value


def _text(data: dict[str, Any], field: str, max_length: int, *, required: bool = True) -> str:
    value = data.get(_leaf(field), "")
    if value is None:
        value = ""
    if not isinstance(value, str) or len(value) > max_length:
        raise _invalid(field, f"`{field}` is text of at most {max_length} characters.")
    if any(unicodedata.category(ch) == "Cc" and ch not in "\n\t" for ch in value):
        raise _invalid(field, f"`{field}` holds a control character.")
    if required and not value.strip():
        raise _invalid(field, f"`{field}` is required.")
    return value.strip()


def _slug(data: dict[str, Any], field: str) -> str:
    value = _text(data, field, 64)
    if not SLUG_CODE.match(value):
        raise _invalid(
            field,
            f"`{field}` ({value!r}) is 1-64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit.",
        )
    return value


def _integer(data: dict[str, Any], field: str, low: int, high: int, *, default: int | None = None) -> int:
    value = data.get(_leaf(field), default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _invalid(field, f"`{field}` is a whole number from {low} to {high}.")
    return value


def _decimal(
    data: dict[str, Any], field: str, low: Decimal, high: Decimal | None, *, open_: bool = False
) -> Decimal | None:
    """The decimal under the field's name (a string or a whole number), None when absent."""
    raw = data.get(_leaf(field))
    if raw is None:
        return None
    value: Decimal | None = None
    if isinstance(raw, str | int) and not isinstance(raw, bool):
        try:
            value = Decimal(str(raw))
        except InvalidOperation:
            value = None
    if value is None or not value.is_finite():
        raise _invalid(field, f'`{field}` is a decimal number as a string, e.g. "12.50".')
    too_low = value <= low if open_ else value < low
    too_high = high is not None and (value >= high if open_ else value > high)
    if too_low or too_high:
        if high is None:
            bounds = f"at least {low}"
        else:
            bounds = f"between {low} and {high}" + (" (both excluded)" if open_ else "")
        raise _invalid(field, f"`{field}` must be {bounds}.")
    return value


def _required(value: Decimal | None, field: str) -> Decimal:
    if value is None:
        raise _invalid(field, f'`{field}` is required (a decimal number as a string, e.g. "12.50").')
    return value


def _currency(prices: dict[str, Any]) -> str:
    value = prices.get("currency")
    if value not in CURRENCIES:
        raise _invalid("prices.currency", f"`prices.currency` is one of {', '.join(CURRENCIES)}.")
    return str(value)


def _tensors(data: dict[str, Any], field: str) -> tuple[TensorSpec, ...]:
    value = data.get(_leaf(field))
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_TENSORS:
        raise _invalid(field, f"`{field}` is a list of 1 to {MAX_TENSORS} tensors.")
    tensors: list[TensorSpec] = []
    for index, item in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(item, dict):
            raise _invalid(where, f"`{where}` is an object with name, dtype and shape.")
        name = item.get("name")
        if not isinstance(name, str) or not name or len(name) > 128:
            raise _invalid(f"{where}.name", f"`{where}.name` is the tensor's name in the model.")
        if item.get("dtype") not in DTYPE_NAMES:
            raise _invalid(f"{where}.dtype", f"`{where}.dtype` is one of {', '.join(DTYPE_NAMES)}.")
        shape = item.get("shape")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_RANK
            or not all(d is None or (isinstance(d, int) and not isinstance(d, bool) and d > 0) for d in shape)
        ):
            raise _invalid(
                f"{where}.shape",
                f"`{where}.shape` is a list of at most {MAX_RANK} sizes, each a positive number or null "
                "(free).",
            )
        tensors.append(TensorSpec(name, item["dtype"], tuple(shape)))
    if len({t.name for t in tensors}) != len(tensors):
        raise _invalid(field, f"`{field}` names a tensor twice.")
    return tuple(tensors)
