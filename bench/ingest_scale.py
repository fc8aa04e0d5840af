"""Ingest on one node, then on two: aggregate records/s over HTTP and the scaling efficiency.

    python -m tools.testenv -- .venv/bin/python bench/ingest_scale.py [--records 20000] [--batch 10000]

Each node is a gunicorn process serving `POST /v1/ingest/batches` (bench.ingest.serve_gunicorn) with its
own chDB data directory, standing in for one shard of a ClickHouse cluster; both write to the one
PostgreSQL, which holds the shared log (one `LogState` row: appends serialise on its lock) and the
sequence bookkeeping. One agent per client, each client posting its pre-signed batches to its node, one
batch at a time, as an agent's shipper does. First one node and one client, then two nodes with a client
each, at once. Prints records/s of each and 2-node ÷ (2 × 1-node).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Replace this script's folder on the path: its name would shadow the `ingest` app.
sys.path[0:1] = [str(ROOT), str(ROOT / "platform")]

from bench.benchdb import use_fresh_database  # noqa: E402 - needs the path above
from bench.ingest import serve_gunicorn  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=20_000, help="records per client (default 20000)")
    parser.add_argument("--batch", type=int, default=10_000, help="records per batch (default 10000)")
    args = parser.parse_args()
    use_fresh_database("treemeter_bench_scale")
    run(args.records, args.batch)


def run(total: int, size: int) -> None:
    import base64
    from datetime import UTC, datetime

    import httpx
    from django.conf import settings
    from rich.console import Console

    from agents.services import register_agent
    from compute_agents.synthetic import Workload, synthetic_records
    from demo.services import seed_demo
    from treemeter_records import CONTENT_TYPE, build_batch, private_key_from_seed, public_key_bytes

    console = Console(width=160)
    setup = seed_demo(settings.DATA_DIR)
    start = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp()) * 10**9

    def bodies_for(agent: str, seed: int) -> list[bytes]:
        key = private_key_from_seed(bytes([seed]) * 32)
        register_agent(
            agent_id=agent,
            public_key_b64=base64.b64encode(public_key_bytes(key)).decode(),
            tenant_codes=[setup.tenant.code],
            contract_codes=[setup.contract.code],
        )
        workload = Workload(agent, setup.tenant.code, setup.contract.code, setup.package.code)
        records = list(
            synthetic_records(
                workload, first_seq=0, count=total, start_ns=start, end_ns=start + 86_400 * 10**9, seed=seed
            )
        )
        return [build_batch(records[i : i + size], agent, key).body() for i in range(0, total, size)]

    plans = {name: bodies_for(name, seed) for seed, name in enumerate(("scale-a", "scale-b", "scale-c"), 1)}

    def ship(url: str, bodies: list[bytes]) -> None:
        with httpx.Client(base_url=url, timeout=600) as client:
            for body in bodies:
                answer = client.post(
                    "/v1/ingest/batches", content=body, headers={"Content-Type": CONTENT_TYPE}
                )
                assert answer.status_code == 200, answer.text
                assert answer.json()["accepted"] == len(body.splitlines()) - 1, answer.text

    with serve_gunicorn("scale-node-1", size) as first, serve_gunicorn("scale-node-2", size) as second:
        ship(first, plans["scale-a"][:1])  # warm the first node (imports, caches) outside the clock
        ship(second, plans["scale-b"][:1])
        began = time.perf_counter()
        ship(first, plans["scale-a"][1:])
        one = (total - size) / (time.perf_counter() - began)
        console.print(f"1 node: {one:,.0f} rec/s")

        clients = [
            threading.Thread(target=ship, args=(first, plans["scale-c"])),
            threading.Thread(target=ship, args=(second, plans["scale-b"][1:])),
        ]
        began = time.perf_counter()
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        two = (2 * total - size) / (time.perf_counter() - began)
        console.print(
            f"2 nodes: {two:,.0f} rec/s, scaling {two / one:.2f}x, efficiency {two / (2 * one):.2f}"
        )


if __name__ == "__main__":
    main()
