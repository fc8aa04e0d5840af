"""Custom metrics, re-measured from the records: the platform's expression grammar, per-record values and
aggregations (docs/billing.md, "Dimensions and custom metrics", "Aggregations"), kept here on its own.

    expr   := or ;  or := and ("or" and)* ;  and := cmp ("and" cmp)*
    cmp    := sum (("<" | "<=" | ">" | ">=" | "=" | "==" | "!=") sum)?
    sum    := term (("+" | "-") term)* ;  term := unary (("*" | "/") unary)*
    unary  := "-" unary | atom
    atom   := NUMBER | FIELD | ("min" | "max") "(" expr "," expr ")" | "if" "(" expr "," expr "," expr ")"
              | "(" expr ")"
    metric := AGGREGATION "(" expr ")" | expr        (without one: sum)

A record's value is computed as the engine does, in IEEE 754 doubles (Python floats: the same + - * /,
each rounded once): every field is a Float64, x / 0 is 0, a comparison, ``and`` and ``or`` are 1 or 0.
That value becomes an exact decimal of 18 places the way ClickHouse's ``toDecimal256(value, 18)`` makes
it (``decimal18``), and the period's quantity is aggregated from those decimals exactly and billed to 6
places (half to even, as Python's default context quantizes). Only billable records count: status ok,
not superseded by a retry.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, NamedTuple

from .rating import CHARGE_MODELS, amount_problems, charge_amount, priced_as, segment_amounts

PLACES = Decimal("0.000001")  # a metric's quantity is billed to 6 decimal places
SCALE = 10**18  # each record's value is a decimal of 18 places: an integer of 1e-18 units here
AGGREGATIONS = ("sum", "period_max", "unique_count", "latest", "time_weighted_sum")
ADDITIVE = frozenset({"sum", "time_weighted_sum"})  # the period's quantity is the sum of its parts'
AGGREGATION_LABELS = {
    "sum": "sum",
    "period_max": "period max",
    "unique_count": "unique count",
    "latest": "latest",
    "time_weighted_sum": "time-weighted sum",
}
# The platform quantizes in Python's default context: 28 digits, half to even.
_QUANTIZE = Context(prec=28, rounding=ROUND_HALF_EVEN)
_EXACT = Context(prec=100)

Value = Callable[[dict[str, Any]], float]


class MetricError(ValueError):
    """An expression outside the grammar, or a record value the engine cannot take as a decimal."""


def _layer_us(layer: str) -> Value:
    return lambda r: float(sum(h["latency_us"] for h in r["hops"] if h["layer"].lower() == layer))


def _cache_hit_ratio(r: dict[str, Any]) -> float:
    looked_up = float(r["expert_cache_hits"] + r["expert_cache_misses"])
    return 0.0 if looked_up == 0 else float(r["expert_cache_hits"]) / looked_up


# Each field as the engine computes it from the stored record (`metric_sql.FIELD_SQL` on the platform).
FIELDS: dict[str, Value] = {
    "requests": lambda r: 1.0,
    "tokens_in": lambda r: float(r["tokens_in"]),
    "tokens_out": lambda r: float(r["tokens_out"]),
    "cached_tokens": lambda r: float(r["prefix_cache_hit_tokens"]),
    "cache_write_tokens": lambda r: float(r.get("prefix_cache_write_tokens", 0)),
    "distinct_experts": lambda r: float(r["distinct_experts"]),
    "expert_tokens": lambda r: float(r["expert_tokens"]),
    "hops": lambda r: float(len(r["hops"])),
    "l2_hits": lambda r: float(r["expert_cache_hits"]),
    "l2_misses": lambda r: float(r["expert_cache_misses"]),
    "cache_hit_ratio": _cache_hit_ratio,
    "l1_latency_us": _layer_us("l1"),
    "l2_latency_us": _layer_us("l2"),
    "l3_latency_us": _layer_us("l3"),
    "l3_seconds": lambda r: _layer_us("l3")(r) / 1000000.0,
    "latency_ms": lambda r: float(r["end_ns"] - r["start_ns"]) / 1000000.0,
}
_TOKEN = re.compile(
    r"\s*(?:(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|([A-Za-z_][A-Za-z0-9_]*)|(<=|>=|==|!=|[-+*/(),<>=]))"
)
_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "=": lambda a, b: a == b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
MAX_LENGTH = 500


@dataclass(frozen=True)
class Metric:
    """A pinned metric: its text, its aggregation, the text it aggregates and its per-record value."""

    expression: str
    aggregation: str
    inner: str
    value: Value

    @property
    def additive(self) -> bool:
        return self.aggregation in ADDITIVE

    def describe(self) -> str:
        """E.g. ``period max of tokens_in``."""
        return f"{AGGREGATION_LABELS[self.aggregation]} of {self.inner}"


class Parser:
    """Recursive descent over the tokens, building the value as nested closures."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, position)
        position = 0
        while expression[position:].strip():
            match = _TOKEN.match(expression, position)
            if match is None:
                start = len(expression) - len(expression[position:].lstrip())
                raise MetricError(f"unexpected character {expression[start]!r} at position {start}")
            kind = ("number", "name", "op")[(match.lastindex or 1) - 1]
            self.tokens.append((kind, match.group(match.lastindex or 0), match.start(match.lastindex or 0)))
            position = match.end()
        self.tokens.append(("end", "", len(expression)))
        self.index = 0

    def _peek(self) -> tuple[str, str, int]:
        return self.tokens[self.index]

    def _take(self, text: str) -> bool:
        kind, found, _ = self._peek()
        if kind in ("op", "name") and found.lower() == text:
            self.index += 1
            return True
        return False

    def _expect(self, text: str) -> None:
        if not self._take(text):
            _, found, position = self._peek()
            raise MetricError(f"expected {text!r}, found {found or 'the end'!r} at position {position}")

    def metric(self) -> Metric:
        kind, name, _ = self._peek()
        aggregation, inner = "sum", self.expression.strip()
        if kind == "name" and name.lower() in AGGREGATIONS:
            aggregation = name.lower()
            self.index += 1
            self._expect("(")
            begin = self._peek()[2]
            value = self._or()
            inner = self.expression[begin : self._peek()[2]].strip()
            self._expect(")")
        else:
            value = self._or()
        _, found, position = self._peek()
        if self._peek()[0] != "end":
            raise MetricError(f"unexpected {found!r} at position {position}")
        return Metric(self.expression, aggregation, inner, value)

    def _or(self) -> Value:
        value = self._and()
        while self._take("or"):
            value = _logical(value, self._and(), either=True)
        return value

    def _and(self) -> Value:
        value = self._comparison()
        while self._take("and"):
            value = _logical(value, self._comparison(), either=False)
        return value

    def _comparison(self) -> Value:
        value = self._sum()
        kind, text, _ = self._peek()
        if kind == "op" and text in _COMPARISONS:
            self.index += 1
            left, right, compare = value, self._sum(), _COMPARISONS[text]
            value = lambda r: 1.0 if compare(left(r), right(r)) else 0.0  # noqa: E731
        return value

    def _sum(self) -> Value:
        value = self._term()
        while self._peek()[0] == "op" and self._peek()[1] in ("+", "-"):
            operator = self._peek()[1]
            self.index += 1
            value = _arithmetic(operator, value, self._term())
        return value

    def _term(self) -> Value:
        value = self._unary()
        while self._peek()[0] == "op" and self._peek()[1] in ("*", "/"):
            operator = self._peek()[1]
            self.index += 1
            value = _arithmetic(operator, value, self._unary())
        return value

    def _unary(self) -> Value:
        if self._take("-"):
            operand = self._unary()
            return lambda r: -operand(r)
        return self._atom()

    def _atom(self) -> Value:
        kind, text, position = self._peek()
        if kind == "number":
            self.index += 1
            number = float(text)
            return lambda r: number
        if kind == "name":
            name = text.lower()
            self.index += 1
            if name in ("min", "max", "if"):
                return self._call(name, position)
            if name in FIELDS:
                return FIELDS[name]
            raise MetricError(f"unknown field {text!r} at position {position}")
        if self._take("("):
            value = self._or()
            self._expect(")")
            return value
        raise MetricError(
            f"expected a number, field or '(', found {text or 'the end'!r} at position {position}"
        )

    def _call(self, name: str, position: int) -> Value:
        self._expect("(")
        arguments = [self._or()]
        while self._take(","):
            arguments.append(self._or())
        self._expect(")")
        if len(arguments) != (3 if name == "if" else 2):
            raise MetricError(f"{name}() at position {position} takes the wrong number of arguments")
        if name == "if":
            condition, then, otherwise = arguments
            return lambda r: then(r) if condition(r) != 0 else otherwise(r)
        first, second = arguments
        if name == "min":  # the engine's least(a, b): a < b ? a : b
            return lambda r: a if (a := first(r)) < (b := second(r)) else b
        return lambda r: a if (a := first(r)) > (b := second(r)) else b  # greatest(a, b)


def _logical(left: Value, right: Value, either: bool) -> Value:
    if either:
        return lambda r: 1.0 if left(r) != 0 or right(r) != 0 else 0.0
    return lambda r: 1.0 if left(r) != 0 and right(r) != 0 else 0.0


def _arithmetic(operator: str, left: Value, right: Value) -> Value:
    if operator == "+":
        return lambda r: left(r) + right(r)
    if operator == "-":
        return lambda r: left(r) - right(r)
    if operator == "*":
        return lambda r: left(r) * right(r)
    return lambda r: 0.0 if (d := right(r)) == 0 else left(r) / d  # x / 0 is 0


@lru_cache(maxsize=256)
def parse_metric(expression: str) -> Metric:
    """A pinned metric expression, or MetricError naming what is wrong and where."""
    if not isinstance(expression, str) or not expression.strip():
        raise MetricError("the expression is empty")
    if len(expression) > MAX_LENGTH:
        raise MetricError(f"the expression is longer than {MAX_LENGTH} characters")
    return Parser(expression).metric()


# ClickHouse's toDecimal256(x, 18) for a Float64 x (src/DataTypes/DataTypesDecimal.h, convertToDecimalImpl,
# and base/base/wide_integer_impl.h, wide_integer_from_builtin(double)), on x86-64:
#   out = x * 1e18 in double (one rounding); |out| >= 2**255 fails the query (so do inf and NaN);
#   |out| < 2**63: truncated toward zero (static_cast<int64_t>);
#   else, of |out| (then negated): alpha = |out| / (2**64 - 1) in 80-bit long double, and the integer is
#   floor(alpha) * (2**64 - 1) + (uint64)(|out| - floor(alpha) * (2**64 - 1)), that product and that
#   difference each rounded to long double's 64-bit significand: exact below 2**64 - 1 (|x| < 18.44…),
#   a few units of 1e-18 off above it (100.0 becomes 100.000000000000000003).
_U64 = 2**64
_M = _U64 - 1  # uint64 max, exactly a long double
_I256 = 2**255


def _round_significand(n: int, bits: int) -> int:
    """An integer rounded to `bits` significant bits, half to even (long double: 64, double: 53)."""
    size = abs(n).bit_length()
    if size <= bits:
        return n
    shift = size - bits
    q, r = divmod(abs(n), 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return (q << shift) if n > 0 else -(q << shift)


def _long_double_quotient(t: int, d: int) -> tuple[int, int]:
    """t / d (both > 0) rounded to a 64-bit significand, half to even: (q, s) with the value q / 2**s."""
    s = 64 - (t.bit_length() - d.bit_length())
    while True:
        q, r = divmod(t << s, d) if s >= 0 else divmod(t, d << -s)
        divisor = d if s >= 0 else d << -s
        if q >= _U64:
            s -= 1
        elif q < _U64 >> 1:
            s += 1
        else:
            break
    if 2 * r > divisor or (2 * r == divisor and q & 1):
        q += 1
    return q, s


def _from_double(t: float) -> int:
    """set_multiplier<double>: the recursion the engine takes when |out| / (2**64 - 1) >= 2**64 - 1."""
    alpha = t / 18446744073709551616.0  # static_cast<double>(2**64 - 1) is 2**64
    whole = int(alpha) if alpha < 18446744073709551616.0 else _from_double(alpha)
    rest = t - float(math.floor(alpha)) * 18446744073709551616.0
    return whole * _M + int(rest) % _U64


def _wide_from_long_double(t: int) -> int:
    """set_multiplier<long double> of an integer t >= 2**63 (an integral double)."""
    q, s = _long_double_quotient(t, _M)
    floor_alpha = q >> s if s >= 0 else q << -s
    whole = floor_alpha  # below 2**64 - 1: the cast; above: the engine recurses in double
    if floor_alpha >= _M:
        whole = _from_double(q / (1 << s) if s >= 0 else float(q << -s))
    rest = _round_significand(t - _round_significand(floor_alpha * _M, 64), 64)
    return whole * _M + rest % _U64


@lru_cache(maxsize=65536)
def decimal18(x: float) -> int:
    """A record's Float64 value as ClickHouse's toDecimal256(x, 18) makes it, in units of 1e-18; MetricError
    where the engine fails the query (not finite, or beyond Decimal256)."""
    if not math.isfinite(x):
        raise MetricError(f"the value {x} is not finite: the engine cannot take it as a decimal")
    out = x * 1e18
    if out <= -_I256 or out >= _I256:
        raise MetricError(f"the value {x} is beyond a Decimal256 of 18 places")
    if -9223372036854775808.0 < out < 9223372036854775807.0:
        return int(out)  # truncated toward zero
    magnitude = _wide_from_long_double(int(abs(out)))
    return -magnitude if out < 0 else magnitude


def as_decimal(units: int) -> Decimal:
    """Units of 1e-18 as an exact Decimal."""
    return Decimal(units).scaleb(-18, _EXACT)


def billed(units: int) -> Decimal:
    """The quantity billed: to 6 places, half to even (the platform's ``quantize`` in the default context)."""
    return as_decimal(units).quantize(PLACES, context=_QUANTIZE)


class Valued(NamedTuple):
    """A billable record's start, record id (as text, lower case) and value in units of 1e-18."""

    start_ns: int
    record_id: str
    value: int


def values_of(metric: Metric, records: Iterable[dict[str, Any]]) -> list[Valued]:
    """Each record's value (MetricError naming the record whose value the engine could not take)."""
    out = []
    for record in records:
        try:
            value = decimal18(metric.value(record))
        except MetricError as error:
            raise MetricError(f"record {record['record_id']}: {error}") from None
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise MetricError(
                f"record {record['record_id']} lacks a field the metric reads: {error!r}"
            ) from None
        out.append(Valued(int(record["start_ns"]), str(record["record_id"]).lower(), value))
    return out


def billable_records(
    records: Iterable[Any],
    tenant: str,
    contract: str,
    start_ns: int,
    end_ns: int,
    superseded: frozenset[str] | set[str] = frozenset(),
) -> list[dict[str, Any]]:
    """The records the platform's rating query aggregates: the contract's, starting in the period, with
    status ok, not among the ``superseded`` record ids (a retry's signed decision names them), each
    record id once. Anything else (not a record, another contract's) is left out here: the export's
    other checks name it."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for record in records:
        if not isinstance(record, dict) or record.get("status") != "ok":
            continue
        record_id, start = str(record.get("record_id")), record.get("start_ns")
        if (
            record.get("tenant") != tenant
            or record.get("contract") != contract
            or type(start) is not int
            or not start_ns <= start < end_ns
            or record_id in superseded
            or record_id in seen
        ):
            continue
        seen.add(record_id)
        out.append(record)
    return out


def _toward_zero(n: int, d: int) -> int:
    """n / d truncated toward zero (Decimal ÷ Int64 in the engine)."""
    q = abs(n) // d
    return q if n >= 0 else -q


def measure(
    metric: Metric, values: Sequence[Valued], start_ns: int, end_ns: int, bounds: Sequence[int] = ()
) -> tuple[int, list[int]]:
    """The period's aggregate and, for an additive metric, each segment's (the period cut at the
    contract's price-change instants ``bounds``, ascending): units of 1e-18. A record is in the segment
    of its start (how many bounds are at or before it). A non-additive metric's segments are not
    measured (empty): its period's figure is one.

    - sum: the values added up, per segment;
    - period_max: the largest value; unique_count: how many distinct values (as a decimal);
    - latest: the value of the greatest (start, record id as text);
    - time_weighted_sum: in (start, record id) order, each value × the ns until the next record's start
      (the last one's until the period end), added up per segment, each segment's total divided by the
      period's length in ns, truncated toward zero to 18 places.
    An empty period is 0."""
    aggregation = metric.aggregation
    if not values:
        return 0, [0] * (len(bounds) + 1) if metric.additive else []
    if aggregation == "period_max":
        return max(v.value for v in values), []
    if aggregation == "unique_count":
        return len({v.value for v in values}) * SCALE, []
    if aggregation == "latest":
        return max(values, key=lambda v: (v.start_ns, v.record_id)).value, []
    segments = [0] * (len(bounds) + 1)
    if aggregation == "sum":
        for v in values:
            segments[bisect_right(bounds, v.start_ns)] += v.value
        return sum(segments), segments
    if aggregation != "time_weighted_sum":
        raise MetricError(f"unknown aggregation {aggregation!r}")
    ordered = sorted(values, key=lambda v: (v.start_ns, v.record_id, v.value))
    following = [v.start_ns for v in ordered[1:]] + [end_ns]
    for v, until in zip(ordered, following, strict=True):
        segments[bisect_right(bounds, v.start_ns)] += v.value * (until - v.start_ns)
    period = end_ns - start_ns
    segments = [_toward_zero(total, period) for total in segments]
    return sum(segments), segments


def period_quantity(
    expression: str, records: Iterable[dict[str, Any]], start_ns: int, end_ns: int, bounds: Sequence[int] = ()
) -> tuple[Decimal, list[Decimal]]:
    """A metric's billed quantity over the billable ``records`` of [start_ns, end_ns), and each segment's
    (additive metrics only) where ``bounds`` cut the period."""
    metric = parse_metric(expression)
    total, segments = measure(metric, values_of(metric, records), start_ns, end_ns, bounds)
    return billed(total), [billed(s) for s in segments]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def instant_ns(text: str) -> int:
    """An ISO instant (``effective_from``) as exact Unix nanoseconds."""
    instant = datetime.fromisoformat(text)
    if instant.utcoffset() is None:
        instant = instant.replace(tzinfo=UTC)
    return (instant - _EPOCH) // timedelta(microseconds=1) * 1000


def change_instants(prices: dict[str, Any], start_ns: int, end_ns: int) -> list[int]:
    """Where the rating query cuts the period: every instant inside it where some dimension's price
    version starts (the contract's segments, the same for all its dimensions and metrics)."""
    instants = {
        moment
        for terms in prices.values()
        for version in terms.get("versions", [terms])
        if version.get("effective_from")
        and start_ns < (moment := instant_ns(version["effective_from"])) < end_ns
    }
    return sorted(instants)


def _spans(
    versions: list[dict[str, Any]], start_ns: int, end_ns: int
) -> list[tuple[dict[str, Any], int, int]]:
    """Each version (oldest first) with the part [begin, finish) of the period it prices; none for the
    versions that price none of it."""
    starts = [instant_ns(v["effective_from"]) if v.get("effective_from") else start_ns for v in versions]
    spans = []
    for k, version in enumerate(versions):
        begin = max(start_ns, starts[k])
        finish = min(end_ns, starts[k + 1]) if k + 1 < len(versions) else end_ns
        if begin < finish:
            spans.append((version, begin, finish))
    return spans


Verdict = tuple[str, list[str], str]  # (check, problems, what passed)


def metric_verdicts(
    invoice: dict[str, Any], prices: dict[str, Any], records: Sequence[dict[str, Any]]
) -> list[Verdict]:
    """One verdict per custom metric with usage lines (``invoice["metrics"]``: code → pinned expression):
    its quantity re-measured from the billable ``records``, its amount re-rated from the pinned terms
    (``rating.charge_amount``; a price changed within the period: ``rating.segment_amounts`` over each
    version's re-measured segment)."""
    metrics: dict[str, str] = invoice["metrics"]
    start_ns, end_ns = invoice["period_start_ns"], invoice["period_end_ns"]
    lines: dict[str, list[dict[str, Any]]] = {}
    for line in invoice["lines"]:
        if line["kind"] == "usage" and "catalogue" not in line and line["dimension"] in metrics:
            lines.setdefault(line["dimension"], []).append(line)
    if not lines:
        return []
    bounds = change_instants(prices, start_ns, end_ns)
    out = []
    for code, ours in lines.items():
        check = f"line usage {code}"
        try:
            metric = parse_metric(metrics[code])
            total, segments = measure(metric, values_of(metric, records), start_ns, end_ns, bounds)
        except MetricError as error:
            out.append((check, [f"the pinned metric {metrics[code]!r} cannot be measured: {error}"], ""))
            continue
        terms = prices.get(code)
        if terms is None or terms.get("charge_model") not in CHARGE_MODELS:
            problem = "the contract prices no such metric" if terms is None else "an unknown charge model"
            out.append((check, [problem], ""))
            continue
        spans = _spans(terms.get("versions", [terms]), start_ns, end_ns)
        if not spans:
            out.append((check, ["no pinned price version applies in the period"], ""))
            continue
        whole = len(spans) == 1 and spans[0][1:] == (start_ns, end_ns)
        try:
            if not metric.additive or whole:
                out.append((check, *_one_line(invoice, metric, ours, terms, billed(total))))
            else:
                edges = [start_ns, *bounds, end_ns]
                parts = [
                    sum(
                        (
                            billed(s)
                            for k, s in enumerate(segments)
                            if begin <= edges[k] and edges[k + 1] <= finish
                        ),
                        Decimal(0),
                    )
                    for _, begin, finish in spans
                ]
                out.append((check, *_version_lines(invoice, metric, ours, spans, parts)))
        except (InvalidOperation, KeyError, TypeError, ValueError, StopIteration) as error:
            out.append((check, [f"the line cannot be re-rated: {error!r}"], ""))
    return out


def _one_line(
    invoice: dict[str, Any],
    metric: Metric,
    ours: list[dict[str, Any]],
    terms: dict[str, Any],
    quantity: Decimal,
) -> tuple[list[str], str]:
    """The metric's one line: the period's quantity, priced by the version in force at the period end."""
    currency = invoice["currency"]
    if len(ours) != 1 or "segment_start" in ours[0]:
        return [f"{len(ours)} lines, but the pinned terms price the period's {metric.describe()} in one"], ""
    stated, amount = Decimal(ours[0]["quantity"]), Decimal(ours[0]["amount"])
    expected = charge_amount(terms, quantity, Decimal(0), currency)
    problems = []
    if stated != quantity:
        problems.append(f"quantity {stated} but the records give {quantity} (off by {stated - quantity})")
    problems += amount_problems(amount, expected, currency)
    return problems, f"quantity {quantity} ({metric.describe()}) {priced_as(terms)} = {expected} {currency}"


def _version_lines(
    invoice: dict[str, Any],
    metric: Metric,
    ours: list[dict[str, Any]],
    spans: list[tuple[dict[str, Any], int, int]],
    parts: list[Decimal],
) -> tuple[list[str], str]:
    """An additive metric whose price changed within the period: a line per version, each with the
    records of its part of the period, rated by the platform's rule (`rating.segment_amounts`), and
    maybe a period-bound line."""
    currency = invoice["currency"]
    segments = {x["effective_from"]: x for x in ours if "segment_start" in x}
    bounds = [x for x in ours if "segment_start" not in x]
    amounts, bound = segment_amounts(
        [(version, quantity) for (version, _, _), quantity in zip(spans, parts, strict=True)],
        spans[-1][0],
        currency,
    )
    problems = []
    for (version, _, _), quantity, expected in zip(spans, parts, amounts, strict=True):
        since = version["effective_from"]
        name = f"version from {since or 'the contract start'}"
        line = segments.pop(since, None)
        if line is None:
            problems.append(f"{name}: no line, but the records give {quantity} for {expected} {currency}")
            continue
        stated, amount = Decimal(line["quantity"]), Decimal(line["amount"])
        if stated != quantity:
            problems.append(
                f"{name}: quantity {stated} but the records give {quantity} (off by {stated - quantity})"
            )
        if amount != expected:
            problems.append(
                f"{name}: amount {amount} {currency} but its terms give {expected} "
                f"(off by {amount - expected} {currency})"
            )
    problems += [
        f"a line for the version from {since}, which prices none of the period" for since in segments
    ]
    stated_bound = Decimal(bounds[0]["amount"]) if bounds else None
    if len(bounds) > 1 or stated_bound != bound:
        problems.append(f"period bound line {stated_bound} {currency} but the newest terms give {bound}")
    total = sum(amounts, Decimal(0)) + (bound or 0)
    good = (
        f"quantity {sum(parts, Decimal(0))} ({metric.describe()}) over {len(spans)} price versions "
        f"= {total} {currency}"
    )
    return problems, good
