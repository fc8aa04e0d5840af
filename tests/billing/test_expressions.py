"""Custom metric expressions: the whitelisted grammar, its errors with positions, and what the rendered
SQL computes in the real ClickHouse engine."""

from __future__ import annotations

import pytest

from clickhouse_store import query
from clickhouse_store.queries.metric_sql import metric_sql
from pricing.errors import TermsError
from pricing.expressions import parse_metric
from tests.billing.usage import at, send
from tests.factories import ContractFactory


@pytest.mark.parametrize(
    ("expression", "position", "says"),
    [
        ("", 0, "empty"),
        ("tokens_in +", 11, "Expected a number, field or '('"),
        ("tokens_in + 1) FROM system.tables --", 26, "Unexpected character '.'"),
        ("tokens_in + 1) FROM tables", 13, "Unexpected ')'"),
        ("tokens_in; DROP TABLE usage_records", 9, "Unexpected character ';'"),
        ("sleep(3)", 0, "Unknown field 'sleep'"),
        ("max(tokens_in)", 0, "max() takes 2 arguments, not 1"),
        ("if(hops > 1, 2)", 0, "if() takes 3 arguments, not 2"),
        ("(hops * 2", 9, "Expected ')'"),
        ("hops * 'x'", 7, "Unexpected character"),
        ("outcome_f1 > 0.9", 0, "Unknown field 'outcome_f1'"),  # rule fields only in verification rules
        ("x" * 501, 500, "longer than 500"),
    ],
)
def test_anything_outside_the_grammar_is_refused_naming_the_position(
    expression: str, position: int, says: str
) -> None:
    with pytest.raises(TermsError) as raised:
        parse_metric(expression)
    assert raised.value.code == "invalid_expression"
    assert raised.value.details == {"position": position}
    assert says in raised.value.message


def test_numbers_are_bound_parameters_and_no_user_text_reaches_the_sql() -> None:
    metric = parse_metric("tokens_in * 12345.678 + min(hops, 7)")
    compiled = metric_sql(metric)
    assert "12345.678" not in compiled.sql and "7" not in compiled.sql
    assert compiled.params == {"p0": 12345.678, "p1": 7.0}
    assert metric.fields == {"tokens_in", "hops"}
    rule = metric_sql(parse_metric("outcome_f1 >= 0.92", rule=True))
    assert "f1" not in rule.sql and rule.params == {"p0": "f1", "p1": 0.92}


@pytest.mark.django_db
@pytest.mark.usefixtures("clickhouse")
@pytest.mark.parametrize(
    ("expression", "per_record"),
    [
        ("distinct_experts * hops * (1 - cache_hit_ratio)", 5.0),  # 3 × 5 × (1 − 2/3)
        ("tokens_out - tokens_in", -80.0),  # Float64: no unsigned wrap-around
        ("min(tokens_in, tokens_out) + max(hops, 10)", 30.0),
        ("if(latency_ms > 100, 2, 3)", 2.0),  # 150 ms
        ("tokens_in / (hops - 5)", 0.0),  # x / 0 is 0
        ("l3_seconds * 1000", 90.0),
        ("tokens_in >= 100 and hops < 5 or cached_tokens = 10", 1.0),
        ("-tokens_out * 2.5e-1", -5.0),
        (
            "l1_latency_us + l2_latency_us + l2_hits + l2_misses + expert_tokens + requests",
            500 + 3000 + 2 + 1 + 476 + 1,
        ),
    ],
)
def test_what_the_compiled_sql_computes(expression: str, per_record: float) -> None:
    contract = ContractFactory.create()
    send(contract, 2, at(2026, 11, 3))
    compiled = metric_sql(parse_metric(expression))
    (row,) = query.select(f"SELECT sum({compiled.sql}) FROM {query.RECORDS}", compiled.params)
    assert row[0] == pytest.approx(2 * per_record)
