"""Standalone verifier speed on a 1,000,000-record invoice, and the log's append cost at ingest.

Run with `make bench-verify` (real PostgreSQL and a fresh chDB directory; ARGS="--records 200000" for a
smaller run). It ingests the invoice's records through the real ingest path in signed batches of 1,000,
each followed in turn by a batch of another tenant that also goes into the log (so the invoice's leaves
are interleaved) and, every fifth batch, a batch of a third tenant ingested with the log append switched
off: the log's cost per record is the difference, also timed directly inside the append. Then it rates
the invoice, publishes a checkpoint, builds the export (/v1/ledger/invoices/<id>/export), compresses it
as `compress=gzip` does, and times the `treemeter-verify` console process checking each, the plain one
and the compressed one (read in memory). Record generation and signing are off the clock.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Replace this script's folder on the path: its name would shadow platform apps.
sys.path[0:1] = [str(ROOT), str(ROOT / "platform")]

from bench.benchdb import use_fresh_database  # noqa: E402 - needs the path above

BATCH = 1_000
NOV_NS = 1_793_491_200 * 10**9  # 2026-11-01T00:00:00Z


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="records on the invoice")
    parser.add_argument("--workdir", type=Path, default=None, help="where the export is written")
    args = parser.parse_args()
    use_fresh_database("treemeter_bench_verify")
    run(args.records, args.workdir)


def _record(agent: str, contract: Any, seq: int, record_id: str) -> dict[str, Any]:
    start = NOV_NS + seq * 2_000_000_000
    return {
        "v": 1,
        "record_id": record_id,
        "agent_id": agent,
        "seq": seq,
        "tenant": contract.tenant.code,
        "contract": contract.code,
        "package": contract.package.code,
        "sla_class": "standard",
        "client_request_id": f"req-{seq}",
        "model_id": "tiny-qwen3-moe",
        "weights_sha3": "ab" * 32,
        "start_ns": start,
        "end_ns": start + 150_000_000,
        "clock_drift_us": 3,
        "tokens_in": 100 + seq % 50,
        "tokens_out": 20 + seq % 7,
        "hops": [
            {"layer": "L1", "node": "router-1", "latency_us": 400},
            {"layer": "L2", "node": "cache-1", "latency_us": 2_000},
            {"layer": "L3", "node": "gpu-1", "latency_us": 90_000 + seq % 1000},
            {"layer": "L2", "node": "cache-1", "latency_us": 1_000},
            {"layer": "L1", "node": "router-1", "latency_us": 100},
        ],
        "experts": [
            {"layer": 0, "expert": 1, "tokens": 150},
            {"layer": 0, "expert": 4, "tokens": 88},
            {"layer": 1, "expert": 2, "tokens": 238},
        ],
        "distinct_experts": 3,
        "expert_tokens": 476,
        "prefix_cache_hit_tokens": 10,
        "expert_cache_hits": 2,
        "expert_cache_misses": 1,
        "status": "ok" if seq % 97 else "error",
        "outcome": None,
    }


def run(total: int, workdir: Path | None) -> None:
    from datetime import UTC, datetime
    from decimal import Decimal

    from django.conf import settings
    from rich.console import Console

    import ingest.services as ingest_services
    import ledger.services as ledger_services
    from accounts.models import Tenant
    from agents.services import register_agent
    from billing.exports import compressed, export_body, invoice_export
    from billing.services import generate_invoice
    from catalog.models import ComputePackage
    from clickhouse_store.client import close_client
    from clickhouse_store.migrator import apply_migrations
    from contracts.models import Contract, ContractPrice
    from ledger.models import Checkpoint
    from ledger.notes import raw_public_key, verifier_key
    from treemeter_records import build_batch, new_record_id, private_key_from_seed, public_key_to_b64

    settings.INGEST_MAX_PAST_DAYS = 36_500  # the records replay a fixed past month (November 2026)

    console = Console()
    apply_migrations()
    package = ComputePackage.objects.create(code="bench-package", name="Bench")
    contracts = []
    for code in ("bench-invoice", "bench-neighbour", "bench-unlogged"):
        tenant = Tenant.objects.create(code=f"{code}-tenant", name=code)
        contracts.append(
            Contract.objects.create(
                code=code,
                tenant=tenant,
                package=package,
                currency="CNY",
                starts_at=datetime(2026, 1, 1, tzinfo=UTC),
            )
        )
    invoiced, neighbour, unlogged = contracts
    for dimension, price in (("requests", "0.05"), ("tokens_in", "0.0002"), ("l3_seconds", "0.80")):
        ContractPrice.objects.create(contract=invoiced, dimension=dimension, unit_price=Decimal(price))
    agents = []
    for name, contract in (
        ("bench-agent-a", invoiced),
        ("bench-agent-b", neighbour),
        ("bench-agent-c", unlogged),
    ):
        key = private_key_from_seed(os.urandom(32))
        register_agent(
            agent_id=name,
            public_key_b64=public_key_to_b64(key),
            tenant_codes=[],
            contract_codes=[contract.code],
        )
        agents.append((name, contract, key))

    began = time.perf_counter()
    plan: list[tuple[str, bytes]] = []  # (which, body) in ingest order
    seqs = {name: 0 for name, _, _ in agents}
    batches = total // BATCH
    for i in range(batches):
        for which, (name, contract, key) in zip("abc", agents, strict=True):
            if which == "b" and i % 10:
                continue  # the neighbour: one batch in ten, interleaved in the log
            if which == "c" and i % 5:
                continue  # ingested without the log, for the cost comparison
            first = seqs[name]
            records = [_record(name, contract, s, new_record_id()) for s in range(first, first + BATCH)]
            seqs[name] += BATCH
            plan.append((which, build_batch(records, name, key).body()))
    console.print(f"generated and signed {len(plan):,} batches in {time.perf_counter() - began:.1f} s")

    append = ledger_services.append_batch
    in_append = [0.0]

    def timed_append(*args: Any) -> None:
        t = time.perf_counter()
        append(*args)
        in_append[0] += time.perf_counter() - t

    def skip_log(*args: Any) -> None:
        return None

    spent = {"a": 0.0, "b": 0.0, "c": 0.0}
    counted = {"a": 0, "b": 0, "c": 0}
    for which, body in plan:
        ingest_services.append_batch = skip_log if which == "c" else timed_append  # type: ignore[assignment]
        t = time.perf_counter()
        answer = ingest_services.ingest_batch(body)
        spent[which] += time.perf_counter() - t
        assert answer.status == 200 and answer.body["accepted"] == BATCH, answer.body
        counted[which] += BATCH
    ingest_services.append_batch = append
    logged_rate = (counted["a"] + counted["b"]) / (spent["a"] + spent["b"])
    bare_rate = counted["c"] / spent["c"]
    append_us = in_append[0] / (counted["a"] + counted["b"]) * 1e6

    t = time.perf_counter()
    invoice = generate_invoice(
        invoiced.pk, datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    )
    checkpoint = ledger_services.publish_checkpoint(Checkpoint.Reason.INVOICE, invoice.pk)
    invoice_s = time.perf_counter() - t
    t = time.perf_counter()
    manifest, lines = invoice_export(invoice, [])
    body = export_body(manifest, lines)
    export_s = time.perf_counter() - t
    folder = workdir or settings.DATA_DIR / "bench-verify"
    folder.mkdir(parents=True, exist_ok=True)
    export, keys = folder / "export.ndjson", folder / "keys.json"
    export.write_bytes(body)
    platform_key = raw_public_key(private_key_from_seed(settings.PLATFORM_SIGNING_KEY))
    keys.write_text(
        json.dumps(
            {
                "platform": verifier_key(settings.LEDGER_ORIGIN, platform_key),
                "agents": [public_key_to_b64(key) for _, _, key in agents],
            }
        )
    )
    t = time.perf_counter()
    packed = compressed(body)
    compress_s = time.perf_counter() - t
    packed_export = folder / "export.ndjson.gz"
    packed_export.write_bytes(packed)
    # A customer verifies on a machine of their own: the export on disk, nothing else running. Here
    # the engine's background merges of the million new rows and the write-back of the 1 GB file would
    # share the two cores with the verifier, so both end first.
    close_client()
    _flush(export, packed_export)
    exported, exported_mb, packed_mb = len(lines), len(body) / 1e6, len(packed) / 1e6
    del manifest, lines, body, packed
    verify_s = _verify(export, keys, console)
    packed_verify_s = _verify(packed_export, keys, console, quiet=True)

    console.print(
        f"\nlog: {checkpoint.size:,} leaves; invoice {invoice.pk}: {invoice.record_count:,} records"
    )
    console.print(
        f"invoice + checkpoint: {invoice_s:.1f} s; export built: {export_s:.1f} s, {exported_mb:,.0f} MB "
        f"(goal ≤ 20 s); gzip (compress=gzip): {compress_s:.1f} s more, {packed_mb:,.0f} MB"
    )
    console.print(
        f"[bold]treemeter-verify: {verify_s:.2f} s for {exported:,} records = "
        f"{exported / verify_s:,.0f} records/s (goal ≤ 10 s); the gzip export, read in memory: "
        f"{packed_verify_s:.2f} s[/bold]"
    )
    console.print(
        f"ingest with the log: {logged_rate:,.0f} rec/s; without: {bare_rate:,.0f} rec/s; "
        f"ratio {logged_rate / bare_rate:.3f}; append_batch itself: {append_us:.1f} µs/record"
    )


def _flush(*paths: Path) -> None:
    """Write the files through to disk."""
    for path in paths:
        with path.open("rb+") as file:
            os.fsync(file.fileno())


def _verify(export: Path, keys: Path, console: Any, quiet: bool = False) -> float:
    """Seconds of the `treemeter-verify` console process checking `export` fully."""
    env = {"PYTHONPATH": str(ROOT / "verifier"), "PATH": os.environ.get("PATH", "")}
    command = [sys.executable, "-m", "treemeter_verify", str(export), "--keys", str(keys)]
    t = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - t
    if not quiet:
        console.print(done.stdout.rstrip())
    if done.returncode != 0:
        console.print(done.stderr)
        raise SystemExit(f"the verifier failed on {export.name} (exit {done.returncode})")
    return seconds


if __name__ == "__main__":
    main()
