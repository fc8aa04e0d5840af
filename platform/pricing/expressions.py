"""Custom metrics: a whitelisted expression grammar, parsed into a small typed tree.

    expr   := or ;  or := and ("or" and)* ;  and := cmp ("and" cmp)*
    cmp    := sum (("<" | "<=" | ">" | ">=" | "=" | "==" | "!=") sum)?
    sum    := term (("+" | "-") term)* ;  term := unary (("*" | "/") unary)*
    unary  := "-" unary | atom
    atom   := NUMBER | FIELD | ("min" | "max") "(" expr "," expr ")" | "if" "(" expr "," expr "," expr ")"
              | "(" expr ")"

A custom metric (not an outcome rule) may wrap the whole expression in one aggregation, which says how
the per-record values become the period's quantity:

    metric := AGGREGATION "(" expr ")" | expr        (without one: `sum`)

- `sum`: the values added up;
- `period_max`: the largest value;
- `unique_count`: how many distinct values;
- `latest`: the value of the latest record (by start, then record id);
- `time_weighted_sum`: each record's value held from its start until the next record's (the last one's
  until the period ends; nothing before the first), times the time held, over the period's length:
  10 held for half the period is 5.

The tree holds numbers and whitelisted field names only, never user text; the ClickHouse layer renders
it to parameterised SQL (`clickhouse_store.queries.metric_sql`): a field becomes its whitelisted column
expression, a number a bound Float64 parameter. Every value is Float64 (so `tokens_in - tokens_out`
cannot wrap around); x / 0 is 0; a comparison, `and` and `or` are 1 or 0. Each record's value is taken
exactly as a decimal of 18 places (`clickhouse_store.queries.billing.METRIC_VALUE`), aggregated in the
engine, and billed to 6 decimal places.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeAlias

from .errors import TermsError

# The per-record fields a metric can read (their SQL: `clickhouse_store.queries.metric_sql.FIELD_SQL`).
FIELDS: tuple[str, ...] = (
    "requests",
    "tokens_in",
    "tokens_out",
    "cached_tokens",
    "cache_write_tokens",
    "distinct_experts",
    "expert_tokens",
    "hops",
    "l2_hits",
    "l2_misses",
    "cache_hit_ratio",
    "l1_latency_us",
    "l2_latency_us",
    "l3_latency_us",
    "l3_seconds",
    "latency_ms",
)
# Outcome verification rules (billing.outcomes) may also use the period's figures, computed per contract
# over the period's records, and `outcome_<key>`: a number in the record's outcome object (the key is a
# bound parameter too), e.g. `outcome_f1 >= 0.92 and p99_latency_ms <= 300`.
RULE_FIELDS: tuple[str, ...] = (*FIELDS, "p50_latency_ms", "p99_latency_ms", "error_rate")
_COMPARISONS = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "=": "=", "==": "=", "!=": "!="}
_TOKEN = re.compile(
    r"\s*(?:(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|([A-Za-z_][A-Za-z0-9_]*)|(<=|>=|==|!=|[-+*/(),<>=]))"
)
MAX_LENGTH = 500

# How a metric's per-record values become the period's quantity (the module docstring says each).
AGGREGATIONS: tuple[str, ...] = ("sum", "period_max", "unique_count", "latest", "time_weighted_sum")
# Those whose period quantity is the sum of its parts' (of the period cut at price changes).
ADDITIVE_AGGREGATIONS: frozenset[str] = frozenset({"sum", "time_weighted_sum"})


@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Field:
    """A whitelisted field (`FIELDS`, or `RULE_FIELDS` in a rule)."""

    name: str


@dataclass(frozen=True)
class OutcomeValue:
    """`outcome_<key>` in a rule: the number under `key` in the record's outcome object."""

    key: str


@dataclass(frozen=True)
class Negate:
    operand: Node


@dataclass(frozen=True)
class Arithmetic:
    operator: str  # "+", "-", "*", "/"
    left: Node
    right: Node


@dataclass(frozen=True)
class Comparison:
    operator: str  # "<", "<=", ">", ">=", "=", "!=" ("==" is read as "=")
    left: Node
    right: Node


@dataclass(frozen=True)
class Logical:
    operator: str  # "and", "or"
    left: Node
    right: Node


@dataclass(frozen=True)
class Call:
    function: str  # "min", "max" (two arguments), "if" (three: condition, then, else)
    arguments: tuple[Node, ...]


Node: TypeAlias = Number | Field | OutcomeValue | Negate | Arithmetic | Comparison | Logical | Call


@dataclass(frozen=True)
class Metric:
    """A parsed custom metric (or outcome rule): its text, its tree (a per-record Float64 value), the
    fields it reads, and how the period aggregates it (`AGGREGATIONS`; a rule's is `sum`, unused)."""

    expression: str
    tree: Node
    fields: frozenset[str]
    aggregation: str = "sum"

    @property
    def additive(self) -> bool:
        """Whether the period's quantity is the sum of its parts' (see ADDITIVE_AGGREGATIONS)."""
        return self.aggregation in ADDITIVE_AGGREGATIONS


@dataclass(frozen=True)
class Token:
    kind: str  # "number", "name", "op", "end"
    text: str
    position: int


def _error(message: str, position: int, expression: str) -> TermsError:
    return TermsError(
        "invalid_expression",
        f"{message} at position {position}: {expression[:position]}⟨here⟩{expression[position:]}",
        {"position": position},
    )


def _tokenize(expression: str) -> list[Token]:
    tokens, position = [], 0
    while position < len(expression):
        if expression[position:].strip() == "":
            break
        match = _TOKEN.match(expression, position)
        if match is None:
            start = len(expression) - len(expression[position:].lstrip())
            raise _error(f"Unexpected character {expression[start]!r}", start, expression)
        start = match.start(match.lastindex or 0)
        if match.group(1):
            tokens.append(Token("number", match.group(1), start))
        elif match.group(2):
            tokens.append(Token("name", match.group(2), start))
        else:
            tokens.append(Token("op", match.group(3), start))
        position = match.end()
    tokens.append(Token("end", "", len(expression)))
    return tokens


class _Parser:
    def __init__(self, expression: str, rule: bool) -> None:
        self.expression = expression
        self.fields = RULE_FIELDS if rule else FIELDS
        self.rule = rule
        self.tokens = _tokenize(expression)
        self.index = 0
        self.used: set[str] = set()

    @property
    def token(self) -> Token:
        return self.tokens[self.index]

    def _take(self, text: str) -> bool:
        if self.token.kind in ("op", "name") and self.token.text.lower() == text:
            self.index += 1
            return True
        return False

    def _expect(self, text: str) -> None:
        if not self._take(text):
            found = self.token.text or "the end"
            raise _error(f"Expected {text!r}, found {found!r}", self.token.position, self.expression)

    def parse(self) -> Metric:
        aggregation, first = "sum", self.token
        wrapped = not self.rule and first.kind == "name" and first.text.lower() in AGGREGATIONS
        if wrapped:
            aggregation = first.text.lower()
            self.index += 1
            self._expect("(")
            tree = self._or()
            self._expect(")")
        else:
            tree = self._or()
        if self.token.kind != "end":
            after = f" (an aggregation, {aggregation}(…), wraps the whole metric)" if wrapped else ""
            raise _error(f"Unexpected {self.token.text!r}{after}", self.token.position, self.expression)
        return Metric(self.expression, tree, frozenset(self.used), aggregation)

    def _or(self) -> Node:
        node = self._and()
        while self._take("or"):
            node = Logical("or", node, self._and())
        return node

    def _and(self) -> Node:
        node = self._comparison()
        while self._take("and"):
            node = Logical("and", node, self._comparison())
        return node

    def _comparison(self) -> Node:
        node = self._sum()
        if self.token.kind == "op" and self.token.text in _COMPARISONS:
            operator = _COMPARISONS[self.token.text]
            self.index += 1
            node = Comparison(operator, node, self._sum())
        return node

    def _sum(self) -> Node:
        node = self._term()
        while self.token.kind == "op" and self.token.text in "+-":
            operator = self.token.text
            self.index += 1
            node = Arithmetic(operator, node, self._term())
        return node

    def _term(self) -> Node:
        node = self._unary()
        while self.token.kind == "op" and self.token.text in "*/":
            operator = self.token.text
            self.index += 1
            node = Arithmetic(operator, node, self._unary())
        return node

    def _unary(self) -> Node:
        if self._take("-"):
            return Negate(self._unary())
        return self._atom()

    def _atom(self) -> Node:
        token = self.token
        if token.kind == "number":
            self.index += 1
            return Number(float(token.text))
        if token.kind == "name":
            name = token.text.lower()
            self.index += 1
            if name in ("min", "max", "if"):
                return self._call(name, token)
            if name in AGGREGATIONS:
                where = "an outcome rule has none" if self.rule else "it wraps the whole metric"
                raise _error(f"{name}() is an aggregation: {where}", token.position, self.expression)
            if name in self.fields:
                self.used.add(name)
                return Field(name)
            if self.rule and name.startswith("outcome_") and len(name) > 8:
                self.used.add(name)
                return OutcomeValue(name[8:])
            known = ", ".join(sorted(self.fields)) + (", outcome_<key>" if self.rule else "")
            raise _error(f"Unknown field {token.text!r} (fields: {known})", token.position, self.expression)
        if self._take("("):
            node = self._or()
            self._expect(")")
            return node
        found = token.text or "the end"
        raise _error(f"Expected a number, field or '(', found {found!r}", token.position, self.expression)

    def _call(self, name: str, token: Token) -> Node:
        self._expect("(")
        args = [self._or()]
        while self._take(","):
            args.append(self._or())
        self._expect(")")
        wanted = 3 if name == "if" else 2
        if len(args) != wanted:
            raise _error(
                f"{name}() takes {wanted} arguments, not {len(args)}", token.position, self.expression
            )
        return Call(name, tuple(args))


def parse_metric(expression: str, *, rule: bool = False) -> Metric:
    """Parse and check a custom metric (or, with `rule`, an outcome verification rule), or
    TermsError('invalid_expression') naming the position."""
    if not isinstance(expression, str) or not expression.strip():
        raise TermsError("invalid_expression", "The expression is empty.", {"position": 0})
    if len(expression) > MAX_LENGTH:
        raise TermsError(
            "invalid_expression",
            f"The expression is longer than {MAX_LENGTH} characters.",
            {"position": MAX_LENGTH},
        )
    return _Parser(expression, rule).parse()


@lru_cache(maxsize=1024)
def metric_aggregation(expression: str) -> str:
    """The aggregation of a custom metric's expression (parsed once per text), or TermsError."""
    return parse_metric(expression).aggregation
