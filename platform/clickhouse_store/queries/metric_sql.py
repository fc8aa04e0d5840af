"""A parsed custom metric (`pricing.expressions`) rendered as parameterised ClickHouse SQL.

No user text reaches the SQL: a field becomes its whitelisted column expression, a number becomes a
bound Float64 parameter and an outcome key a bound String. Every value is Float64 (so
`tokens_in - tokens_out` cannot wrap around); x / 0 is 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pricing.expressions import (
    RULE_FIELDS,
    Arithmetic,
    Call,
    Comparison,
    Field,
    Logical,
    Metric,
    Negate,
    Node,
    Number,
    OutcomeValue,
)

_HITS_MISSES = "toFloat64(expert_cache_hits + expert_cache_misses)"
# Each field of pricing.expressions.RULE_FIELDS as SQL over one record. The period's figures are columns
# the outcome rule's source query adds (`queries.billing.outcome_records`).
FIELD_SQL: dict[str, str] = {
    "requests": "1.0",
    "tokens_in": "toFloat64(tokens_in)",
    "tokens_out": "toFloat64(tokens_out)",
    "cached_tokens": "toFloat64(prefix_cache_hit_tokens)",
    "cache_write_tokens": "toFloat64(prefix_cache_write_tokens)",
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
    "p50_latency_ms": "p50_latency_ms",
    "p99_latency_ms": "p99_latency_ms",
    "error_rate": "error_rate",
}
if set(FIELD_SQL) != set(RULE_FIELDS):
    raise RuntimeError("FIELD_SQL must render exactly the fields of pricing.expressions.RULE_FIELDS")


@dataclass
class MetricSql:
    """`sql` is a per-record Float64 expression; `params` are the numbers (and outcome keys) it binds."""

    sql: str
    params: dict[str, float | str] = field(default_factory=dict)


class _Renderer:
    def __init__(self, param_prefix: str) -> None:
        self.prefix = param_prefix
        self.params: dict[str, float | str] = {}

    def _bind(self, value: float | str, kind: str) -> str:
        name = f"{self.prefix}{len(self.params)}"
        self.params[name] = value
        return f"{{{name}:{kind}}}"

    def sql(self, node: Node) -> str:
        """Depth first, left to right: parameters are numbered in the order they appear in the text."""
        match node:
            case Number(value):
                return self._bind(value, "Float64")
            case Field(name):
                return FIELD_SQL[name]
            case OutcomeValue(key):
                k = self._bind(key, "String")  # decimals are strings in records, counts integers
                return (
                    f"if(JSONType(outcome, {k}) = 'String', "
                    f"toFloat64OrZero(JSONExtractString(outcome, {k})), JSONExtractFloat(outcome, {k}))"
                )
            case Negate(operand):
                return f"(-{self.sql(operand)})"
            case Arithmetic("/", left, right):
                dividend, divisor = self.sql(left), self.sql(right)
                return f"if({divisor} = 0, 0., {dividend} / {divisor})"
            case Arithmetic(operator, left, right):
                return f"({self.sql(left)} {operator} {self.sql(right)})"
            case Comparison(operator, left, right):
                return f"toFloat64({self.sql(left)} {operator} {self.sql(right)})"
            case Logical(operator, left, right):
                # Each operand compared with 0: ClickHouse refuses AND/OR over a constant Float64 that
                # is not 0 or 1 (`tokens_in and 2`), where a column's non-zero value is simply true.
                condition = f"{self.sql(left)} != 0 {operator.upper()} {self.sql(right)} != 0"
                return f"toFloat64({condition})"
            case Call("if", (condition, then, otherwise)):
                return f"if({self.sql(condition)} != 0, {self.sql(then)}, {self.sql(otherwise)})"
            case Call(function, (first, second)):
                least_or_greatest = "least" if function == "min" else "greatest"
                return f"{least_or_greatest}({self.sql(first)}, {self.sql(second)})"
        raise ValueError(f"not a metric node: {node!r}")


def metric_sql(metric: Metric, param_prefix: str = "p") -> MetricSql:
    """The metric as a per-record Float64 SQL expression; its parameters are named `<param_prefix><n>`."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", param_prefix):
        raise ValueError(f"bad parameter prefix {param_prefix!r}")
    renderer = _Renderer(param_prefix)
    sql = renderer.sql(metric.tree)
    return MetricSql(sql, renderer.params)
