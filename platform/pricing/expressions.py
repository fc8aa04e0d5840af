"""Custom metrics: a whitelisted expression grammar compiled to parameterised ClickHouse SQL.

    expr   := or ;  or := and ("or" and)* ;  and := cmp ("and" cmp)*
    cmp    := sum (("<" | "<=" | ">" | ">=" | "=" | "==" | "!=") sum)?
    sum    := term (("+" | "-") term)* ;  term := unary (("*" | "/") unary)*
    unary  := "-" unary | atom
    atom   := NUMBER | FIELD | ("min" | "max") "(" expr "," expr ")" | "if" "(" expr "," expr "," expr ")"
              | "(" expr ")"

No user text reaches the SQL: a field becomes its whitelisted column expression, a number becomes a
bound Float64 parameter. Every value is Float64 (so `tokens_in - tokens_out` cannot wrap around);
x / 0 is 0. The per-record value is summed over the period exactly (as a decimal of 18 places,
`billing.selectors.METRIC_VALUE`) and billed to 6 decimal places.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import TermsError

_HITS_MISSES = "toFloat64(expert_cache_hits + expert_cache_misses)"
FIELDS: dict[str, str] = {
    "requests": "1.0",
    "tokens_in": "toFloat64(tokens_in)",
    "tokens_out": "toFloat64(tokens_out)",
    "cached_tokens": "toFloat64(prefix_cache_hit_tokens)",
    "distinct_experts": "toFloat64(distinct_experts)",
    "expert_tokens": "toFloat64(expert_tokens)",
    "hops": "toFloat64(hops.size0)",
    "l2_hits": "toFloat64(expert_cache_hits)",
    "l2_misses": "toFloat64(expert_cache_misses)",
    "cache_hit_ratio": f"if({_HITS_MISSES} = 0, 0., toFloat64(expert_cache_hits) / {_HITS_MISSES})",
    "l1_latency_us": "toFloat64(l1_latency_us)",
    "l2_latency_us": "toFloat64(l2_latency_us)",
    "l3_latency_us": "toFloat64(l3_latency_us)",
    "l3_seconds": "(toFloat64(l3_latency_us) / 1000000.)",
    "latency_ms": "(toFloat64(end_ns - start_ns) / 1000000.)",
}
# Outcome verification rules (billing.outcomes) may also use the period's figures, computed per contract
# over the period's records, and `outcome_<key>`: a number in the record's outcome object (the key is a
# bound parameter too), e.g. `outcome_f1 >= 0.92 and p99_latency_ms <= 300`.
RULE_FIELDS: dict[str, str] = {
    **FIELDS,
    "p50_latency_ms": "p50_latency_ms",
    "p99_latency_ms": "p99_latency_ms",
    "error_rate": "error_rate",
}
_COMPARISONS = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "=": "=", "==": "=", "!=": "!="}
_TOKEN = re.compile(
    r"\s*(?:(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|([A-Za-z_][A-Za-z0-9_]*)|(<=|>=|==|!=|[-+*/(),<>=]))"
)
MAX_LENGTH = 500


@dataclass(frozen=True)
class Token:
    kind: str  # "number", "name", "op", "end"
    text: str
    position: int


@dataclass
class CompiledMetric:
    """`sql` is a per-record Float64 expression; `params` are the numbers it binds."""

    sql: str
    params: dict[str, float | str] = field(default_factory=dict)
    fields: set[str] = field(default_factory=set)


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
    def __init__(self, expression: str, param_prefix: str, rule: bool) -> None:
        self.expression = expression
        self.fields = RULE_FIELDS if rule else FIELDS
        self.rule = rule
        self.tokens = _tokenize(expression)
        self.index = 0
        self.prefix = param_prefix
        self.compiled = CompiledMetric("")

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

    def parse(self) -> CompiledMetric:
        self.compiled.sql = self._or()
        if self.token.kind != "end":
            raise _error(f"Unexpected {self.token.text!r}", self.token.position, self.expression)
        return self.compiled

    def _or(self) -> str:
        sql = self._and()
        while self._take("or"):
            sql = f"({sql} OR {self._and()})"
        return sql

    def _and(self) -> str:
        sql = self._comparison()
        while self._take("and"):
            sql = f"({sql} AND {self._comparison()})"
        return sql

    def _comparison(self) -> str:
        sql = self._sum()
        if self.token.kind == "op" and self.token.text in _COMPARISONS:
            operator = _COMPARISONS[self.token.text]
            self.index += 1
            sql = f"toFloat64({sql} {operator} {self._sum()})"
        return sql

    def _sum(self) -> str:
        sql = self._term()
        while self.token.kind == "op" and self.token.text in "+-":
            operator = self.token.text
            self.index += 1
            sql = f"({sql} {operator} {self._term()})"
        return sql

    def _term(self) -> str:
        sql = self._unary()
        while self.token.kind == "op" and self.token.text in "*/":
            operator = self.token.text
            self.index += 1
            right = self._unary()
            sql = f"({sql} * {right})" if operator == "*" else f"if({right} = 0, 0., {sql} / {right})"
        return sql

    def _unary(self) -> str:
        if self._take("-"):
            return f"(-{self._unary()})"
        return self._atom()

    def _bind(self, value: float | str, kind: str) -> str:
        name = f"{self.prefix}{len(self.compiled.params)}"
        self.compiled.params[name] = value
        return f"{{{name}:{kind}}}"

    def _atom(self) -> str:
        token = self.token
        if token.kind == "number":
            self.index += 1
            return self._bind(float(token.text), "Float64")
        if token.kind == "name":
            name = token.text.lower()
            self.index += 1
            if name in ("min", "max", "if"):
                return self._call(name, token)
            if name in self.fields:
                self.compiled.fields.add(name)
                return self.fields[name]
            if self.rule and name.startswith("outcome_") and len(name) > 8:
                self.compiled.fields.add(name)
                key = self._bind(name[8:], "String")  # decimals are strings in records, counts integers
                return (
                    f"if(JSONType(outcome, {key}) = 'String', "
                    f"toFloat64OrZero(JSONExtractString(outcome, {key})), JSONExtractFloat(outcome, {key}))"
                )
            known = ", ".join(sorted(self.fields)) + (", outcome_<key>" if self.rule else "")
            raise _error(f"Unknown field {token.text!r} (fields: {known})", token.position, self.expression)
        if self._take("("):
            sql = self._or()
            self._expect(")")
            return sql
        found = token.text or "the end"
        raise _error(f"Expected a number, field or '(', found {found!r}", token.position, self.expression)

    def _call(self, name: str, token: Token) -> str:
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
        if name == "if":
            return f"if({args[0]} != 0, {args[1]}, {args[2]})"
        return f"{'least' if name == 'min' else 'greatest'}({args[0]}, {args[1]})"


def compile_metric(expression: str, param_prefix: str = "p", *, rule: bool = False) -> CompiledMetric:
    """Compile a custom metric (or, with `rule`, an outcome verification rule), or
    TermsError('invalid_expression') naming the position."""
    if not isinstance(expression, str) or not expression.strip():
        raise TermsError("invalid_expression", "The expression is empty.", {"position": 0})
    if len(expression) > MAX_LENGTH:
        raise TermsError(
            "invalid_expression",
            f"The expression is longer than {MAX_LENGTH} characters.",
            {"position": MAX_LENGTH},
        )
    if not re.fullmatch(r"[a-z][a-z0-9_]*", param_prefix):
        raise ValueError(f"bad parameter prefix {param_prefix!r}")
    return _Parser(expression, param_prefix, rule).parse()
