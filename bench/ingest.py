"""Ingest throughput: the real ingest path, in-process and over HTTP, against a bare ClickHouse insert.

Run with `make bench` (real PostgreSQL and a fresh chDB directory). For batches of 1k and 10k records
it prints records/s through `ingest_batch` (parse, Ed25519 check, Merkle root, per-record validation,
binding and sequence dedup, PostgreSQL bookkeeping and log, one ClickHouse insert), records/s of the
same kind of batches posted over loopback to `POST /v1/ingest/batches` served by gunicorn as production
serves it (one sync worker with its own chDB directory, since chDB allows one process per data path;
the same PostgreSQL), and records/s for a bare columnar clickhouse-connect insert of the same
rows into the same engine and table schema, with the ratios. Then, per record: the time inside the
log append (`ledger.services.append_batch`) and inside the ClickHouse insert of the accepted lines
(`insert_record_lines`: JSONEachRow into usage_records, whose materialized views fill the dashboard
rollups), and a bare JSONEachRow insert of the same lines into a table without those views: what the
engine itself spends on the ingest's insert. Signing and record generation happen before the clock.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Replace this script's folder on the path: its name would shadow the `ingest` app.
sys.path[0:1] = [str(ROOT), str(ROOT / "platform")]

from bench.benchdb import use_fresh_database  # noqa: E402 - needs the path above

PAST_DAYS = "36500"  # the records replay a fixed past month (November 2026)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=20_000, help="records per batch size (default 20000)")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--no-http", action="store_true", help="skip the gunicorn path")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    use_fresh_database("treemeter_bench")
    run(args.records, sizes, http=not args.no_http)


def run(total: int, sizes: list[int], *, http: bool) -> None:
    from datetime import UTC, datetime

    import httpx
    import orjson
    from django.conf import settings
    from rich.console import Console
    from rich.table import Table

    import ingest.outbox
    import ingest.services
    from clickhouse_store import query
    from clickhouse_store.migrator import apply_migrations
    from clickhouse_store.schema import OPTIONAL_FIELDS, RECORD_FIELDS
    from compute_agents.synthetic import Workload, synthetic_records
    from demo.services import EXECUTOR_IDS, seed_demo
    from ingest.services import ingest_batch
    from treemeter_records import CONTENT_TYPE, build_batch, private_key_from_seed

    console = Console(width=200)
    settings.INGEST_MAX_BATCH_RECORDS = max(sizes)
    settings.INGEST_MAX_PAST_DAYS = int(PAST_DAYS)
    apply_migrations()
    setup = seed_demo(settings.DATA_DIR)
    agent_id = EXECUTOR_IDS[0]
    key = private_key_from_seed(setup.seeds[agent_id])
    workload = Workload(agent_id, setup.tenant.code, setup.contract.code, setup.package.code)
    start = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp()) * 10**9
    query.command("CREATE TABLE IF NOT EXISTS bench_bare AS usage_records")

    in_append = _timed(ingest.services, "append_batch")
    in_insert = _timed(ingest.outbox, "insert_record_lines")
    table = Table(title=f"Ingest throughput, {total:,} records per batch size")
    headings = ["batch size", "ingest rec/s", "HTTP rec/s", "bare insert rec/s", "ratio", "HTTP ratio"]
    headings += ["log append µs/rec", "ClickHouse insert µs/rec", "bare JSON insert µs/rec"]
    for column in headings:
        table.add_column(column, justify="right")

    def bodies_of(first_seq: int, seed: int) -> tuple[list[dict[str, Any]], list[bytes]]:
        records = list(
            synthetic_records(
                workload,
                first_seq=first_seq,
                count=total,
                start_ns=start,
                end_ns=start + 86_400 * 10**9,
                seed=seed,
            )
        )
        return records, [
            build_batch(records[i : i + size], agent_id, key).body() for i in range(0, total, size)
        ]

    with serve_gunicorn("bench-http", max(sizes)) if http else _no_server() as url:
        first_seq = 0
        for size in sizes:
            records, bodies = bodies_of(first_seq, size)
            first_seq += total
            query.command("TRUNCATE TABLE usage_records")

            in_append[0] = in_insert[0] = 0.0
            began = time.perf_counter()
            for body in bodies:
                answer = ingest_batch(body)
                accepted = len(body.splitlines()) - 1
                assert answer.status == 200 and answer.body["accepted"] == accepted, answer.body
            ingest_rate = total / (time.perf_counter() - began)
            append_us, insert_us = in_append[0] / total * 1e6, in_insert[0] / total * 1e6
            stored = query.select(f"SELECT count() FROM {query.RECORDS}")[0][0]
            assert stored == total, stored

            http_rate = None
            if url is not None:
                _, http_bodies = bodies_of(first_seq, size + 1)
                first_seq += total
                with httpx.Client(base_url=url, timeout=300) as client:
                    began = time.perf_counter()
                    for body in http_bodies:
                        response = client.post(
                            "/v1/ingest/batches", content=body, headers={"Content-Type": CONTENT_TYPE}
                        )
                        accepted = len(body.splitlines()) - 1
                        assert response.status_code == 200, response.text
                        assert response.json()["accepted"] == accepted, response.text
                    http_rate = total / (time.perf_counter() - began)

            fields = (*RECORD_FIELDS, *OPTIONAL_FIELDS)
            columns = [
                [
                    orjson.dumps(r["outcome"]).decode()
                    if name == "outcome" and r["outcome"]
                    else ("" if name == "outcome" else r.get(name, 0))  # an optional field: absent is 0
                    for r in records
                ]
                for name in fields
            ]
            query.command("TRUNCATE TABLE bench_bare")
            began = time.perf_counter()
            for i in range(0, total, size):
                query.insert_rows(
                    "bench_bare", fields, [c[i : i + size] for c in columns], column_oriented=True
                )
            bare_rate = total / (time.perf_counter() - began)

            line_batches = [b"\n".join(body.split(b"\n")[1:]) for body in bodies]
            query.command("TRUNCATE TABLE bench_bare")
            began = time.perf_counter()
            for lines in line_batches:
                query.insert_json_lines("bench_bare", lines)
            json_us = (time.perf_counter() - began) / total * 1e6

            table.add_row(
                f"{size:,}",
                f"{ingest_rate:,.0f}",
                "—" if http_rate is None else f"{http_rate:,.0f}",
                f"{bare_rate:,.0f}",
                f"{ingest_rate / bare_rate:.2f}",
                "—" if http_rate is None else f"{http_rate / bare_rate:.2f}",
                f"{append_us:.2f}",
                f"{insert_us:.2f}",
                f"{json_us:.2f}",
            )
            console.print(
                f"batch size {size:,}: ingest {ingest_rate:,.0f} rec/s, HTTP "
                f"{'—' if http_rate is None else f'{http_rate:,.0f}'} rec/s, bare {bare_rate:,.0f} rec/s"
            )
    console.print(table)


@contextmanager
def _no_server() -> Iterator[None]:
    yield None


@contextmanager
def serve_gunicorn(name: str, max_records: int) -> Iterator[str]:
    """gunicorn serving the platform on a free loopback port: the same PostgreSQL, its own chDB (in the
    data dir's folder `name`: one ingest node, standing in for one ClickHouse shard). Yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = Path(os.environ.get("TREEMETER_DATA_DIR", "var")) / name
    env = {
        **os.environ,
        "TREEMETER_DATA_DIR": str(data),
        "CLICKHOUSE_URL": f"chdb://{data / 'clickhouse'}",
        "INGEST_MAX_BATCH_RECORDS": str(max_records),
        "INGEST_MAX_PAST_DAYS": PAST_DAYS,
        "LOG_LEVEL": "WARNING",
    }
    python = Path(sys.executable)
    subprocess.run([python, "manage.py", "migrate_clickhouse"], cwd=ROOT, env=env, check=True)
    command = [str(python.parent / "gunicorn"), "config.wsgi:application", "--bind", f"127.0.0.1:{port}"]
    command += ["--workers", "1", "--timeout", "300"]
    server = subprocess.Popen(command, cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(url, server)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_until_up(url: str, server: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {server.returncode}")
        try:
            httpx.get(f"{url}/v1/ingest/batches", timeout=5)  # 405: up
            return
        except httpx.TransportError:
            time.sleep(0.5)
    raise RuntimeError("gunicorn did not answer within 120 s")


def _timed(module: Any, name: str) -> list[float]:
    """Wrap `module.name` to add its wall time to the returned one-item list."""
    spent = [0.0]
    inner = getattr(module, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - began

    setattr(module, name, timed)
    return spent


if __name__ == "__main__":
    main()
