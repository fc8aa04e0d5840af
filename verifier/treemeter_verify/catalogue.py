"""Lines priced by the LLM price catalogue, re-rated from the records and the export's pinned versions.

The platform's rule (docs/billing.md, "The LLM price catalogue"), kept here on its own: each billable
record (status ok, not superseded) is priced by the version of its model in force on the UTC day of its
``start_ns`` (the latest version starting on or before that day). Per model and version there is one
line per token kind: input neither read from nor written to the prefix cache (``tokens_in`` − hits −
writes) at the input price, output at the output price, prefix-cache reads and writes at theirs. A
line's quantity is its tokens in millions; its amount is tokens × list price × (1 + adjustment), rounded
once, half up, to the currency's minor unit.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from .rating import cache_writes, round_money

MILLION = Decimal(1_000_000)
# (dimension, the pinned price it is rated at), in the platform's line order.
KINDS = (
    ("tokens_in", "input"),
    ("tokens_out", "output"),
    ("cached_tokens", "cache_read"),
    ("cache_write_tokens", "cache_write"),
)
# A record's tokens in KINDS order, summed per (model, UTC day).
DayTokens = dict[tuple[str, str], list[int]]


def add_record(days: DayTokens, record: dict[str, Any]) -> None:
    """Count one billable record's tokens under its model and start day."""
    day = datetime.fromtimestamp(int(record["start_ns"]) // 10**9, UTC).date().isoformat()
    writes, reads = cache_writes(record), int(record["prefix_cache_hit_tokens"])
    found = days.setdefault((str(record["model_id"]), day), [0, 0, 0, 0])
    for k, count in enumerate(
        (int(record["tokens_in"]) - reads - writes, int(record["tokens_out"]), reads, writes)
    ):
        found[k] += count


def _version(prices: list[dict[str, Any]], model: str, day: str) -> dict[str, Any] | None:
    """The model's version in force on `day` (ISO): the latest to start on or before it."""
    found = None
    for price in prices:
        in_force = (
            price["model_id"] == model and date.fromisoformat(price["effective_from"]).isoformat() <= day
        )
        if in_force and (found is None or price["effective_from"] > found["effective_from"]):
            found = price
    return found


def catalogue_problems(invoice: dict[str, Any], days: DayTokens) -> tuple[list[str], str]:
    """Each catalogue line against the records' tokens and the pinned versions; the problems name the
    line (model, version, token kind) and by how much it differs."""
    catalogue, currency = invoice["catalogue"], invoice["currency"]
    problems: list[str] = []
    try:
        factor = 1 + Decimal(catalogue["adjustment"])
    except InvalidOperation:
        return ["the pinned catalogue adjustment is not a decimal"], ""
    tokens: dict[tuple[str, str, str], int] = defaultdict(int)
    prices: dict[tuple[str, str], dict[str, Any]] = {}
    for (model, day), counts in sorted(days.items()):
        version = _version(catalogue["prices"], model, day)
        if version is None:
            problems.append(f"records of model {model} on {day} have no pinned catalogue price")
            continue
        prices[(model, version["effective_from"])] = version
        for (dimension, _), count in zip(KINDS, counts, strict=True):
            tokens[(model, version["effective_from"], dimension)] += count
    expected: dict[tuple[str, str, str], tuple[Decimal, Decimal]] = {}
    for (model, since, dimension), count in tokens.items():
        if count:
            price = Decimal(prices[(model, since)][dict(KINDS)[dimension]])
            expected[(model, since, dimension)] = (
                count / MILLION,
                round_money(count * price * factor, currency),
            )
    stated: dict[tuple[str, str, str], tuple[Decimal, Decimal]] = {}
    for line in invoice["lines"]:
        if line["kind"] == "usage" and "catalogue" in line:
            key = (line["catalogue"]["model_id"], line["catalogue"]["effective_from"], line["dimension"])
            stated[key] = (Decimal(line["quantity"]), Decimal(line["amount"]))
    for key in sorted(set(expected) | set(stated)):
        name = f"{key[0]} {key[2]} (catalogue from {key[1]})"
        if key not in stated:
            problems.append(f"{name}: the records have {expected[key][0]} M tokens but the invoice no line")
        elif key not in expected:
            problems.append(
                f"{name}: a line of {stated[key][1]} {currency} for tokens the records do not have"
            )
        else:
            (quantity, amount), (want_quantity, want_amount) = stated[key], expected[key]
            if quantity != want_quantity:
                problems.append(f"{name}: quantity {quantity} but the records give {want_quantity}")
            if amount != want_amount:
                problems.append(
                    f"{name}: amount {amount} {currency} but the pinned price gives {want_amount} "
                    f"(off by {amount - want_amount} {currency})"
                )
    total = sum((amount for _, amount in expected.values()), Decimal(0))
    good = f"{len(expected)} lines over {len(prices)} catalogue versions = {total} {currency}"
    return problems, good
