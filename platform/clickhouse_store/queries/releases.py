"""A gray-release stage's SQL (`releases` maps the rows): per capability model, the stage's records of
one contract package in a window, with what its quality gate and its report need: calls by status,
those the capability's acceptance rule accepts, those within its SLA timeout, and the resources used."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from pricing.expressions import Metric

from .. import query
from .metric_sql import metric_sql


@dataclass(frozen=True)
class StageModel:
    """One capability of a stage as the query needs it: its model id, its acceptance rule (None: every
    successful call is accepted) and its SLA timeout."""

    model_id: str
    rule: Metric | None
    sla_timeout_ms: int


class StageFigures(NamedTuple):
    """One model's records of the window. `calls` are those served or attempted (not `rejected` at
    admission, not `cancelled` by the caller); `accepted` the `ok` ones its acceptance rule holds for;
    `within_sla` the `ok` ones that ended within the SLA timeout."""

    model_id: str
    records: int
    rejected: int
    calls: int
    ok: int
    accepted: int
    within_sla: int
    tokens_in: int
    tokens_out: int
    l3_us: int
    p99_latency_ms: float


# The records of the window with the per-window figures an acceptance rule may read (as the outcome rules'
# source query: p50, p99 and the error rate, here over the stage's records of that model).
_SOURCE = (
    "SELECT *, start_time, l1_latency_us, l2_latency_us, l3_latency_us, "  # noqa: S608 - constant SQL
    "(toFloat64(end_ns - start_ns) / 1000000.) AS latency_ms_, "
    "quantileExact(0.5)(latency_ms_) OVER (PARTITION BY model_id) AS p50_latency_ms, "
    "quantileExact(0.99)(latency_ms_) OVER (PARTITION BY model_id) AS p99_latency_ms, "
    "avg(toFloat64(status != 'ok')) OVER (PARTITION BY model_id) AS error_rate "
    f"FROM {query.RECORDS} "
    "WHERE tenant = {tenant:String} AND contract = {contract:String} AND package = {package:String} "
    "AND model_id IN {models:Array(String)} "
    "AND start_ns >= {start:Int64} AND start_ns < {end:Int64}"
)


def stage_figures(
    tenant: str, contract: str, package: str, start_ns: int, end_ns: int, models: Sequence[StageModel]
) -> dict[str, StageFigures]:
    """Per model id of `models`: its records of [start_ns, end_ns) under this contract package; a model
    without records is absent. One query."""
    if not models:
        return {}
    params: dict[str, Any] = {
        "tenant": tenant,
        "contract": contract,
        "package": package,
        "start": start_ns,
        "end": end_ns,
        "models": [m.model_id for m in models],
        "timeout_models": [m.model_id for m in models],
        "timeouts": [m.sla_timeout_ms for m in models],
    }
    branches: list[str] = []
    for number, model in enumerate(models):
        if model.rule is None:
            continue
        rendered = metric_sql(model.rule, f"g{number}_")
        params |= rendered.params | {f"gm{number}": model.model_id}
        branches += [f"model_id = {{gm{number}:String}}", f"(({rendered.sql}) != 0)"]
    accepted = f"multiIf({', '.join(branches)}, 1)" if branches else "1"
    timeout = "transform(model_id, {timeout_models:Array(String)}, {timeouts:Array(UInt32)}, 0)"
    sql = (
        "SELECT model_id, count(), countIf(status = 'rejected'), "  # noqa: S608 - constant SQL
        "countIf(status NOT IN ('rejected', 'cancelled')), countIf(status = 'ok'), "
        f"countIf(status = 'ok' AND ({accepted}) != 0), "
        f"countIf(status = 'ok' AND latency_ms_ <= {timeout}), "
        "sum(tokens_in), sum(tokens_out), sum(l3_latency_us), "
        "quantileExactIf(0.99)(latency_ms_, status = 'ok') "
        f"FROM ({_SOURCE}) GROUP BY model_id ORDER BY model_id"
    )
    rows = query.select(sql, params)
    return {
        str(m): StageFigures(
            str(m), int(n), int(r), int(c), int(o), int(a), int(w), int(i), int(t), int(g), _ms(p)
        )
        for m, n, r, c, o, a, w, i, t, g, p in rows
    }


def gray_record_ids(
    tenant: str, contract: str, windows: Sequence[tuple[str, int, int]], start: datetime, end: datetime
) -> list[str]:
    """The ids of the contract's records of [start, end) made under a package in one of its windows
    (package, start_ns, end_ns): the usage of stages whose billing is off, which rating leaves out."""
    if not windows:
        return []
    sql = (
        f"SELECT toString(record_id) FROM {query.RECORDS} "  # noqa: S608 - constant SQL
        "WHERE tenant = {tenant:String} AND contract = {contract:String} "
        "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')} "
        "AND arrayExists((p, s, e) -> package = p AND start_ns >= s AND start_ns < e, "
        "{gw_packages:Array(String)}, {gw_starts:Array(Int64)}, {gw_ends:Array(Int64)}) "
        "ORDER BY record_id"
    )
    params: Mapping[str, Any] = {
        "tenant": tenant,
        "contract": contract,
        "start": start,
        "end": end,
        "gw_packages": [w[0] for w in windows],
        "gw_starts": [w[1] for w in windows],
        "gw_ends": [w[2] for w in windows],
    }
    return [str(record_id) for (record_id,) in query.select(sql, params)]


def _ms(value: Any) -> float:
    """A quantile of no rows is NaN: 0 then."""
    number = float(value or 0)
    return 0.0 if number != number else number
