"""The invoice's credits and outcome fees, re-derived with this verifier's own code (docs/billing.md,
"SLA service credits", "Outcome fees", "Prepaid credits and coupons"):

- **SLA service credits** (lines of kind ``service_credit``, their ``service_credit`` details): the
  stated ladder step holds (the measured attainment is below its ``below_percent``, and its
  ``credit_percent`` is the line's), and the amount is −(fee basis × credit % / 100), rounded half up to
  the minor unit. The measured attainment and the fee basis are stated by the platform: the SLA month's
  records and its invoice are not in this export.
- **outcome fees** (the usage line of dimension ``outcomes``, its billed ``outcomes``): the quantity is
  their count, the amount the pinned ``outcomes`` charge on that count and the sum of their values
  (``rating.charge_amount``: quota first, a percentage charge on the value). An outcome declared in a
  record of this export is checked against that record (billable, not superseded; its ref, type and
  value as the platform reads them); one declared through the API, or in a record of another period,
  is stated by the platform.
- **prepaid credits**: 0 ≤ credits applied ≤ total; with a credit order, at most what the line kinds it
  names come to (their taxes added when exclusive), spread over the kinds in that order exactly as the
  pinned allocation says; what is due is the total less the credits and the credit notes, at least 0.
  The wallet's balance and the credit notes are stated by the platform.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, NamedTuple

from .rating import CHARGE_MODELS, charge_amount, round_money

ZERO = Decimal(0)
HUNDRED = Decimal(100)
OUTCOME_PLACES = Decimal("1E-6")  # the platform keeps an outcome's value to 6 places
STATED_SLA = "measured attainment and fee basis stated by the platform: the SLA month is not in this export"


class Finding(NamedTuple):
    """One verdict: ``problems`` None for a check not made (SKIP, ``detail`` says why)."""

    check: str
    problems: list[str] | None
    detail: str


def stated_decimal(text: Any) -> Decimal:
    """A stated figure as a finite Decimal; ValueError otherwise (also for a number that is not text)."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a decimal in text")
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a decimal") from None
    if not value.is_finite():
        raise ValueError(f"{text!r} is not a finite decimal")
    return value


def plain(value: Decimal) -> str:
    return f"{value.normalize():f}"


# SLA service credits


def service_credit_findings(invoice: dict[str, Any]) -> list[Finding]:
    """One verdict per service-credit line."""
    currency = invoice["currency"]
    out = []
    for line in invoice["lines"]:
        if line["kind"] != "service_credit":
            continue
        check = "line service_credit"
        stated = line.get("service_credit")
        if stated is None:
            out.append(Finding(check, None, "an export without the credit's SLA details: not re-derived"))
            continue
        try:
            out.append(Finding(check, *_service_credit(line, stated, currency)))
        except (ValueError, KeyError, TypeError) as error:
            out.append(Finding(check, [f"the credit's details cannot be read: {error}"], ""))
    return out


def _service_credit(line: dict[str, Any], stated: dict[str, Any], currency: str) -> tuple[list[str], str]:
    amount, quantity = stated_decimal(line["amount"]), stated_decimal(line["quantity"])
    percent, basis = stated_decimal(stated["credit_percent"]), stated_decimal(stated["fee_basis"])
    where = f"credit for {stated['month']} (SLA report #{stated['sla_report']})"
    problems = []
    if quantity != 1:
        problems.append(f"{where}: quantity {plain(quantity)}, a credit is one")
    if not ZERO < percent <= HUNDRED:
        problems.append(f"{where}: credit {plain(percent)} % is not in (0, 100]")
    step, measured = stated.get("ladder_step"), stated.get("measured_percent")
    rung = ""
    if step is None or measured is None:
        problems.append(f"{where}: states no ladder step and measured attainment to hold the credit")
    else:
        below, earned, attained = (
            stated_decimal(step["below_percent"]),
            stated_decimal(step["credit_percent"]),
            stated_decimal(measured),
        )
        rung = f"{stated.get('objective')} {plain(attained)} % < {plain(below)} % → {plain(earned)} %"
        if not attained < below:
            problems.append(
                f"{where}: measured {plain(attained)} % is not below the ladder step's {plain(below)} %"
            )
        if earned != percent:
            problems.append(
                f"{where}: the ladder step earns {plain(earned)} % but the line credits {plain(percent)} %"
            )
    expected = -round_money(basis * percent / HUNDRED, currency)
    if amount != expected:
        problems.append(
            f"{where}: amount {amount} {currency} but {plain(percent)} % of {basis} gives {expected} "
            f"(off by {amount - expected} {currency})"
        )
    good = (
        f"{plain(percent)} % of {basis} = {amount} {currency} for {stated['month']} "
        f"(SLA report #{stated['sla_report']}: {rung}; {STATED_SLA})"
    )
    return problems, good


# Outcome fees


def outcome_record_ids(invoice: dict[str, Any]) -> set[str]:
    """The record ids the invoice's billed outcomes name (their records may be in the export)."""
    return {
        outcome["record_id"]
        for line in invoice["lines"]
        if line["kind"] == "usage" and line["dimension"] == "outcomes"
        for outcome in line.get("outcomes") or []
        if isinstance(outcome, dict) and isinstance(outcome.get("record_id"), str)
    }


def declared_outcome(record: dict[str, Any]) -> tuple[str, str, Decimal] | None:
    """(ref, type, value) of the outcome a record declares as the platform reads it: a successful record
    with an outcome object; the ref, else the record id; a string value as a decimal (else, or not finite
    or negative, 0) kept to 6 places; None when the record declares none."""
    outcome = record.get("outcome")
    if record.get("status") != "ok" or not isinstance(outcome, dict):
        return None

    def string(key: str) -> str:
        value = outcome.get(key)
        return value if isinstance(value, str) else ""

    try:
        value = Decimal(string("value") or "0")
    except InvalidOperation:
        value = ZERO
    if not value.is_finite() or value < 0:
        value = ZERO
    return (
        string("ref") or str(record["record_id"]),
        string("type"),
        value.quantize(OUTCOME_PLACES, rounding=ROUND_HALF_UP),
    )


def outcome_findings(
    invoice: dict[str, Any],
    prices: dict[str, Any],
    records: Mapping[str, dict[str, Any]],
    superseded: set[str],
) -> list[Finding]:
    """One verdict per outcome line. ``records``: the export's records by id among those the outcomes
    name; ``superseded``: the ids of the export's records a retry superseded."""
    out = []
    for line in invoice["lines"]:
        if line["kind"] != "usage" or line["dimension"] != "outcomes":
            continue
        check = "line usage outcomes"
        if "outcomes" not in line:
            out.append(Finding(check, None, "an export without the billed outcomes: not re-derived"))
            continue
        try:
            out.append(Finding(check, *_outcome_line(invoice, prices, line, records, superseded)))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            out.append(Finding(check, [f"the billed outcomes cannot be read: {error}"], ""))
    return out


def _outcome_line(
    invoice: dict[str, Any],
    prices: dict[str, Any],
    line: dict[str, Any],
    records: Mapping[str, dict[str, Any]],
    superseded: set[str],
) -> tuple[list[str], str]:
    currency = invoice["currency"]
    billed = line["outcomes"]
    stated_quantity, amount = stated_decimal(line["quantity"]), stated_decimal(line["amount"])
    problems: list[str] = []
    refs = [outcome["ref"] for outcome in billed]
    if len(set(refs)) != len(refs):
        problems.append("an outcome ref is billed more than once")
    values = []
    from_records = 0
    for outcome in billed:
        ref, record_id = outcome["ref"], outcome.get("record_id")
        value = stated_decimal(outcome["value"])
        if value < 0:
            problems.append(f"outcome {ref}: negative value {value}")
        values.append(value)
        record = records.get(record_id) if isinstance(record_id, str) else None
        if record is None:
            continue  # declared through the API or in another period's record: stated by the platform
        from_records += 1
        declared = declared_outcome(record)
        if record_id in superseded:
            problems.append(f"outcome {ref}: its record {record_id} was superseded by a retry")
        elif declared is None:
            problems.append(f"outcome {ref}: its record {record_id} declares no billable outcome")
        elif declared != (ref, outcome["type"], value):
            problems.append(
                f"outcome {ref}: stated as {ref} {outcome['type']} {plain(value)} but its record "
                f"{record_id} declares {declared[0]} {declared[1]} {plain(declared[2])}"
            )
    count, total = Decimal(len(billed)), sum(values, ZERO)
    if stated_quantity != count:
        problems.append(f"quantity {plain(stated_quantity)} but {len(billed)} outcomes are billed")
    terms = prices.get("outcomes")
    if terms is None:
        problems.append("the contract prices no outcomes")
    elif terms["charge_model"] not in CHARGE_MODELS:
        problems.append(f"unknown charge model {terms['charge_model']!r}")
    else:
        expected = charge_amount(terms, count, total, currency)
        if amount != expected:
            problems.append(
                f"amount {amount} {currency} but {len(billed)} outcomes worth {plain(total)} give "
                f"{expected} under {terms['charge_model']} (off by {amount - expected} {currency})"
            )
    stated = len(billed) - from_records
    good = (
        f"{len(billed)} outcomes worth {plain(total)} at {terms['charge_model'] if terms else '?'} = "
        f"{amount} {currency} ({from_records} checked against their records, {stated} declared through "
        "the API or in another period: stated by the platform)"
    )
    return problems, good


# Prepaid credits


def prepaid_credit_finding(invoice: dict[str, Any]) -> Finding:
    """Credits applied, their allocation over the credit order, and what is due."""
    check = "prepaid credits"
    if "credits_applied" not in invoice or "amount_due" not in invoice:
        return Finding(check, None, "an export without its prepaid credits: not re-derived")
    try:
        return Finding(check, *_prepaid(invoice))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        return Finding(check, [f"the credits cannot be read: {error}"], "")


def _kind_due(invoice: dict[str, Any], kind: str) -> Decimal:
    """What the lines of one kind come to with their taxes when these are added to the prices (as
    `billing.services.credit_allocation` counts them)."""
    tax_terms, currency = invoice["tax_terms"], invoice["currency"]
    inclusive = bool(tax_terms["inclusive"])
    lines = [line for line in invoice["lines"] if line["kind"] == kind]
    if tax_terms["taxes"]:  # taxed per line: each line with its own taxes (when exclusive)
        added = ZERO if inclusive else Decimal(1)
        return sum(
            (
                stated_decimal(line["amount"])
                + added * sum((stated_decimal(t["amount"]) for t in line.get("taxes", [])), ZERO)
                for line in lines
            ),
            ZERO,
        )
    gross = Decimal(1) if inclusive else 1 + stated_decimal(tax_terms["rate"])
    return round_money(sum((stated_decimal(line["amount"]) for line in lines), ZERO) * gross, currency)


def _allocation(
    invoice: dict[str, Any], order: list[str], applied: Decimal
) -> tuple[dict[str, Decimal], Decimal]:
    """The credits spread over the kinds of the order, in that order, each up to what its lines come
    to; and how much of ``applied`` that places (less than it when the kinds come to less)."""
    if not order:
        return ({"all": applied} if applied > 0 else {}), applied
    placed, allocation = ZERO, {}
    for kind in order:
        take = max(min(_kind_due(invoice, kind), applied - placed), ZERO)
        if take:
            allocation[kind] = take
            placed += take
    return allocation, placed


def _prepaid(invoice: dict[str, Any]) -> tuple[list[str], str]:
    currency = invoice["currency"]
    total, applied = stated_decimal(invoice["total"]), stated_decimal(invoice["credits_applied"])
    due, notes = stated_decimal(invoice["amount_due"]), stated_decimal(invoice.get("credit_notes", "0"))
    problems = []
    if applied < 0:
        problems.append(f"credits applied {applied} {currency} are negative")
    if applied > max(total, ZERO):
        problems.append(f"credits applied {applied} {currency} exceed the total {total}")
    if round_money(applied, currency) != applied:
        problems.append(f"credits applied {applied} are not whole {currency} minor units")
    order = (invoice.get("terms") or {}).get("credit_order")
    how = "credit order not in this export"
    if order is not None:
        allocation, placed = _allocation(invoice, list(order), max(applied, ZERO))
        if placed < applied:
            problems.append(
                f"credits applied {applied} {currency} but the line kinds they may pay "
                f"({', '.join(order)}) come to {placed}"
            )
        pinned = invoice.get("credit_allocation")
        if pinned is not None:
            found = {kind: stated_decimal(amount) for kind, amount in pinned.items()}
            if found != allocation:
                problems.append(
                    f"allocation {_allocation_text(found)} but the credit order gives "
                    f"{_allocation_text(allocation)}"
                )
        how = f"paying {', '.join(order)}" if order else "paying every line"
    owed = max(total - applied - notes, ZERO)
    if due != owed:
        problems.append(
            f"amount due {due} {currency} but total {total} less credits {applied} and credit notes "
            f"{notes} give {owed} (off by {due - owed} {currency})"
        )
    good = (
        f"total {total} − credits {applied} ({how}) − credit notes {notes} = due {due} {currency} "
        "(the wallet's balance and the credit notes are stated by the platform)"
    )
    return problems, good


def _allocation_text(allocation: dict[str, Decimal]) -> str:
    return ", ".join(f"{kind} {amount}" for kind, amount in allocation.items()) or "none"
