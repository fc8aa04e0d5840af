"""LiteLLM's `model_prices_and_context_window.json`, read and written: the price catalogue's exchange
format, because users already keep one.

The file is one JSON object keyed by model name. Of each entry this reads the four token prices
(`input_cost_per_token`, `output_cost_per_token`, `cache_read_input_token_cost`,
`cache_creation_input_token_cost`) and the `litellm_provider` and `mode` labels; its other keys
(context windows, per-image or per-second prices, capability flags) are not the catalogue's and are
left alone. `sample_spec`, the file's own documentation entry, and entries without a token price (image
or audio models) are skipped and counted. Numbers are read as exact decimals, never as floats.

A malformed entry is refused with the model and the field named; one refusal refuses the whole file
(nothing is stored), and every refusal is listed, so one round of fixes suffices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pricing.errors import InvalidRequest

SAMPLE_SPEC = "sample_spec"
INPUT, OUTPUT = "input_cost_per_token", "output_cost_per_token"
CACHE_READ, CACHE_WRITE = "cache_read_input_token_cost", "cache_creation_input_token_cost"
PRICE_FIELDS = (INPUT, OUTPUT, CACHE_READ, CACHE_WRITE)
MODEL_ID_MAX = 128  # the record format's model_id
LABEL_MAX = {"litellm_provider": 64, "mode": 32}
# Stored with 15 decimal places; at most 15 significant digits, so that a price written back as a JSON
# number (a float, as LiteLLM writes them) reads back as exactly the same decimal.
PLACES, DIGITS = 15, 15
# Embedding models have no output tokens: LiteLLM leaves their output price out.
NO_OUTPUT_MODES = frozenset({"embedding"})


@dataclass(frozen=True)
class ListedPrice:
    """One model's token prices as the file states them (None: not stated; a cache price then falls
    back to the input price when rated)."""

    model_id: str
    input_per_token: Decimal
    output_per_token: Decimal
    cache_read_per_token: Decimal | None
    cache_write_per_token: Decimal | None
    provider: str
    mode: str


@dataclass(frozen=True)
class ParsedFile:
    prices: list[ListedPrice]
    skipped: list[str]


def _number(value: Any, model: str, name: str, refusals: list[dict[str, str]]) -> Decimal | None:
    """A price: a JSON number, not negative, within the stored precision; else a refusal."""
    if not isinstance(value, Decimal):
        refusals.append(_refusal(model, name, "must be a JSON number"))
        return None
    if not value.is_finite() or value < 0:
        refusals.append(_refusal(model, name, "must be a finite number, not negative"))
        return None
    exponent = value.normalize().as_tuple().exponent
    if isinstance(exponent, int) and -exponent > PLACES:
        refusals.append(_refusal(model, name, f"has more than {PLACES} decimal places"))
        return None
    if len(value.normalize().as_tuple().digits) > DIGITS:
        refusals.append(_refusal(model, name, f"has more than {DIGITS} significant digits"))
        return None
    return value


def _refusal(model: str, field: str, message: str) -> dict[str, str]:
    return {"model": model, "field": field, "message": f"{model}: {field} {message}"}


def _label(entry: dict[str, Any], name: str, model: str, refusals: list[dict[str, str]]) -> str:
    value = entry.get(name, "")
    if not isinstance(value, str) or len(value) > LABEL_MAX[name]:
        refusals.append(_refusal(model, name, f"must be a string of at most {LABEL_MAX[name]} characters"))
        return ""
    return value


def _parse_entry(model: str, entry: Any, refusals: list[dict[str, str]]) -> ListedPrice | None:
    if not 0 < len(model) <= MODEL_ID_MAX or not model.isprintable():
        refusals.append(_refusal(model[:MODEL_ID_MAX], "model", "must be 1..128 printable characters"))
        return None
    if not isinstance(entry, dict):
        refusals.append(_refusal(model, "entry", "must be an object"))
        return None
    mode = _label(entry, "mode", model, refusals)
    provider = _label(entry, "litellm_provider", model, refusals)
    if INPUT not in entry and OUTPUT not in entry:
        return None  # no token price: not the catalogue's (skipped)
    if INPUT not in entry:
        refusals.append(_refusal(model, INPUT, "is missing"))
    if OUTPUT not in entry and mode not in NO_OUTPUT_MODES:
        refusals.append(_refusal(model, OUTPUT, "is missing"))
    found = {
        name: _number(entry[name], model, name, refusals) if entry.get(name) is not None else None
        for name in PRICE_FIELDS
    }
    input_price, output_price = found[INPUT], found[OUTPUT]
    if input_price is None or (output_price is None and mode not in NO_OUTPUT_MODES):
        return None
    return ListedPrice(
        model_id=model,
        input_per_token=input_price,
        output_per_token=output_price if output_price is not None else Decimal(0),
        cache_read_per_token=found[CACHE_READ],
        cache_write_per_token=found[CACHE_WRITE],
        provider=provider,
        mode=mode,
    )


def parse_prices(data: Any) -> ParsedFile:
    """The token prices of a decoded file (`load_prices` decodes one), or InvalidRequest
    `invalid_model_prices` listing every malformed entry in `details.refusals`."""
    if not isinstance(data, dict):
        raise InvalidRequest("invalid_model_prices", "The file must be a JSON object keyed by model.", {})
    refusals: list[dict[str, str]] = []
    prices, skipped = [], []
    for model, entry in data.items():
        if model == SAMPLE_SPEC:
            skipped.append(model)
            continue
        price = _parse_entry(model, entry, refusals)
        if price is not None:
            prices.append(price)
        elif not any(r["model"] == model for r in refusals):
            skipped.append(model)
    if refusals:
        first = refusals[0]["message"]
        more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
        raise InvalidRequest("invalid_model_prices", f"{first}{more}.", {"refusals": refusals})
    return ParsedFile(prices, skipped)


def load_prices(text: str | bytes) -> ParsedFile:
    """Decode a file's text, every number as an exact decimal, then `parse_prices`."""
    try:
        data = json.loads(text, parse_float=Decimal, parse_int=Decimal, parse_constant=_no_constant)
    except ValueError as error:
        raise InvalidRequest("invalid_model_prices", f"The file is not JSON: {error}.", {}) from None
    except RecursionError:  # the file is two levels deep; a deeply nested body is not one
        raise InvalidRequest(
            "invalid_model_prices", "The file nests too deeply to be a price file.", {}
        ) from None
    return parse_prices(data)


def _no_constant(name: str) -> Decimal:
    raise ValueError(f"{name} is not a JSON number")


def _json_number(value: Decimal) -> float:
    """A price as the JSON number LiteLLM writes (a float), checked to read back as the same decimal
    (the 15 significant digits `parse_prices` allows always do)."""
    number = float(value)
    if Decimal(repr(number)) != value:
        raise ValueError(f"{value} does not survive as a JSON number")
    return number


def render_prices(prices: list[ListedPrice]) -> str:
    """The prices as a LiteLLM file: one entry per model, its stated prices only (a cache price not
    stated is left out, as the file does)."""
    data: dict[str, dict[str, Any]] = {}
    for price in prices:
        entry: dict[str, Any] = {
            INPUT: _json_number(price.input_per_token),
            OUTPUT: _json_number(price.output_per_token),
        }
        if price.cache_read_per_token is not None:
            entry[CACHE_READ] = _json_number(price.cache_read_per_token)
        if price.cache_write_per_token is not None:
            entry[CACHE_WRITE] = _json_number(price.cache_write_per_token)
        if price.provider:
            entry["litellm_provider"] = price.provider
        if price.mode:
            entry["mode"] = price.mode
        data[price.model_id] = entry
    return json.dumps(data, indent=4, sort_keys=True) + "\n"
