"""Ingest throughput: the real ingest path against a bare clickhouse-connect columnar insert.

Run with `make bench` (real PostgreSQL and a fresh chDB directory). For batches of 1k and 10k records
it prints records/s through `ingest_batch` (parse, Ed25519 check, Merkle root, per-record validation,
binding and sequence dedup, one ClickHouse insert, PostgreSQL bookkeeping) and records/s for a bare
columnar insert of the same rows into the same engine and table schema, and their ratio; then the time
spent inside the log append (`ledger.services.append_batch`) and inside the ClickHouse insert of the
accepted lines (`clickhouse_store.queries.records.insert_record_lines`), per record.
Signing and record generation happen before the clock starts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Replace this script's folder on the path: its name would shadow the `ingest` app.
sys.path[0:1] = [str(ROOT), str(ROOT / "platform")]

from bench.benchdb import use_fresh_database  # noqa: E402 - needs the path above


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=20_000, help="records per batch size (default 20000)")
    parser.add_argument("--sizes", default="1000,10000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    use_fresh_database("treemeter_bench")
    run(args.records, sizes)


def run(total: int, sizes: list[int]) -> None:
    from datetime import UTC, datetime

    import orjson
    from django.conf import settings
    from rich.console import Console
    from rich.table import Table

    import ingest.outbox
    import ingest.services
    from clickhouse_store import query
    from clickhouse_store.migrator import apply_migrations
    from clickhouse_store.schema import RECORD_FIELDS
    from compute_agents.synthetic import Workload, synthetic_records
    from demo.services import seed_demo
    from ingest.services import ingest_batch
    from treemeter_records import build_batch, private_key_from_seed

    console = Console()
    settings.INGEST_MAX_BATCH_RECORDS = max(sizes)
    settings.INGEST_MAX_PAST_DAYS = 36_500  # the records replay a fixed past month (November 2026)
    apply_migrations()
    setup = seed_demo(settings.DATA_DIR)
    key = private_key_from_seed(setup.agent_seed)
    workload = Workload(setup.agent_id, setup.tenant.code, setup.contract.code, setup.package.code)
    start = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp()) * 10**9
    query.command("CREATE TABLE IF NOT EXISTS bench_bare AS usage_records")

    in_append = _timed(ingest.services, "append_batch")
    in_insert = _timed(ingest.outbox, "insert_record_lines")
    table = Table(title=f"Ingest throughput, {total:,} records per batch size")
    headings = ("batch size", "ingest path rec/s", "bare insert rec/s", "ratio", "log append µs/rec")
    for column in (*headings, "ClickHouse insert µs/rec"):
        table.add_column(column, justify="right")
    first_seq = 0
    for size in sizes:
        records = list(
            synthetic_records(
                workload,
                first_seq=first_seq,
                count=total,
                start_ns=start,
                end_ns=start + 86_400 * 10**9,
                seed=size,
            )
        )
        first_seq += total
        bodies = [
            build_batch(records[i : i + size], setup.agent_id, key).body() for i in range(0, total, size)
        ]
        query.command("TRUNCATE TABLE usage_records")

        in_append[0] = in_insert[0] = 0.0
        began = time.perf_counter()
        for body in bodies:
            answer = ingest_batch(body)
            assert answer.status == 200 and answer.body["accepted"] == len(body.splitlines()) - 1, answer.body
        ingest_rate = total / (time.perf_counter() - began)

        columns = [
            [
                orjson.dumps(r["outcome"]).decode()
                if name == "outcome" and r["outcome"]
                else ("" if name == "outcome" else r[name])
                for r in records
            ]
            for name in RECORD_FIELDS
        ]
        query.command("TRUNCATE TABLE bench_bare")
        began = time.perf_counter()
        for i in range(0, total, size):
            query.insert_rows(
                "bench_bare", RECORD_FIELDS, [c[i : i + size] for c in columns], column_oriented=True
            )
        bare_rate = total / (time.perf_counter() - began)

        stored = query.select(f"SELECT count() FROM {query.RECORDS}")[0][0]
        assert stored == total, stored
        table.add_row(
            f"{size:,}",
            f"{ingest_rate:,.0f}",
            f"{bare_rate:,.0f}",
            f"{ingest_rate / bare_rate:.2f}",
            f"{in_append[0] / total * 1e6:.2f}",
            f"{in_insert[0] / total * 1e6:.2f}",
        )
        console.print(f"batch size {size:,}: ingest {ingest_rate:,.0f} rec/s, bare {bare_rate:,.0f} rec/s")
    console.print(table)


def _timed(module: Any, name: str) -> list[float]:
    """Wrap `module.name` to add its wall time to the returned one-item list."""
    spent = [0.0]
    inner = getattr(module, name)

    def timed(*args: Any) -> Any:
        began = time.perf_counter()
        try:
            return inner(*args)
        finally:
            spent[0] += time.perf_counter() - began

    setattr(module, name, timed)
    return spent


if __name__ == "__main__":
    main()
