"""A customer sandbox's records (`sandbox_records`, never read by any production query): the figures its
page shows, its volume per day, and its reset."""

from __future__ import annotations

from datetime import date, datetime
from typing import NamedTuple

from django.conf import settings

from .. import query
from ..schema import sandbox_records_delete


class SandboxFigures(NamedTuple):
    """A sandbox contract's records of a period: how many, how many served, the served ones' latency."""

    records: int
    served: int
    p50_ms: float
    p99_ms: float


_PERIOD = (
    "WHERE tenant = {tenant:String} AND contract = {contract:String} "
    "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')}"
)


def sandbox_figures(tenant: str, contract: str, start: datetime, end: datetime) -> SandboxFigures:
    """Records, served records and the served ones' p50 / p99 latency (ms, end − start) of [start, end)."""
    [row] = query.select(
        "SELECT count(), countIf(status = 'ok'), "  # noqa: S608 - constant SQL
        "quantileExactIf(0.5)((end_ns - start_ns) / 1e6, status = 'ok'), "
        "quantileExactIf(0.99)((end_ns - start_ns) / 1e6, status = 'ok') "
        f"FROM {query.SANDBOX} {_PERIOD}",
        {"tenant": tenant, "contract": contract, "start": start, "end": end},
    )
    records, served, p50, p99 = row
    if not served:  # the engine's quantile of nothing is NaN
        return SandboxFigures(int(records), 0, 0.0, 0.0)
    return SandboxFigures(int(records), int(served), float(p50), float(p99))


def sandbox_daily_volume(
    tenant: str, contract: str, start: datetime, end: datetime
) -> list[tuple[date, int]]:
    """Records per UTC day of [start, end), days without any left out."""
    rows = query.select(
        f"SELECT toDate(start_time) AS day, count() FROM {query.SANDBOX} {_PERIOD} "  # noqa: S608
        "GROUP BY day ORDER BY day",
        {"tenant": tenant, "contract": contract, "start": start, "end": end},
    )
    return [(day, int(n)) for day, n in rows]


def delete_sandbox_records(tenant: str, contract: str) -> None:
    """Every record of the sandbox contract, gone once this returns (a synchronous mutation)."""
    query.command(
        sandbox_records_delete(settings.CLICKHOUSE_CLUSTER) + " SETTINGS mutations_sync = 2",
        {"tenant": tenant, "contract": contract},
    )
