"""Monthly SLA reports for many contracts against one bare ClickHouse percentile query.

    python -m tools.testenv -- .venv/bin/python bench/sla_report.py [--contracts 1000] [--records 10000000]

Fills a fresh chDB directory (tools.testenv gives one) with synthetic usage records for November 2026
(Asia/Shanghai), spread over the contracts with error rates that cross every step of the credit ladder,
generated inside the engine (INSERT … SELECT FROM numbers()). Then it times `compute_report` for every
contract (one deduplicated ClickHouse query each, plus storing the report in PostgreSQL) and, on the same
data in the same run, one bare `quantileExact` over all records, and one bare GROUP BY contract with the
same percentiles; it prints the times and the ratios. Seed 000 terms: availability 99.9 % with the
Bedrock ladder and latency objectives for L1, L2, L3 and end to end. It also times one run of the
burn-rate and health evaluation (the every-minute beat job) over all contracts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0:1] = [str(ROOT), str(ROOT / "platform")]

from bench.benchdb import use_fresh_database  # noqa: E402 - needs the path above

BENCH_DB = "treemeter_bench_sla"
# Errors per thousand requests by contract number modulo 7: 100 %, 99.9 %, 99.8 %, 99.5 %, 99 %, 98 %, 94 %.
ERROR_PERMILLE = [0, 1, 2, 5, 10, 20, 60]
CHUNK = 1_000_000


_INSERT = (
    "INSERT INTO usage_records (v, record_id, agent_id, seq, tenant, contract, package, client_request_id, "
    "model_id, weights_sha3, start_ns, end_ns, clock_drift_us, tokens_in, tokens_out, sla_class, hops, "
    "experts, distinct_experts, expert_tokens, prefix_cache_hit_tokens, expert_cache_hits, "
    "expert_cache_misses, status, outcome) "
    "SELECT 1, generateUUIDv4(number), 'bench-agent', number, "
    "concat('bench-t-', toString(number % {c:UInt64})), concat('bench-c-', toString(number % {c:UInt64})), "
    "'bench-pkg', '', 'tiny-qwen3-moe', '', "
    "{start:Int64} + toInt64(cityHash64(number) % {span:UInt64}) AS s, "
    "s + toInt64(40 + cityHash64(number, 1) % 180) * 1000000, 0, 100, 20, 'standard', "
    "[('L1', 'router-1', toUInt32(cityHash64(number, 2) % 12000)), "
    "('L2', 'cache-1', toUInt32(cityHash64(number, 3) % 35000)), "
    "('L3', 'gpu-1', toUInt32(30000 + cityHash64(number, 4) % 130000))], "
    "[], 0, 0, 0, 0, 0, "
    "multiIf(cityHash64(number, 5) % 1000 < arrayElement({permille:Array(UInt64)}, "
    "toUInt32(number % {c:UInt64} % 7) + 1), 'error', "
    "cityHash64(number, 6) % 1000 < 3, 'rejected', 'ok'), '' "
    "FROM numbers({offset:UInt64}, {count:UInt64})"
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--contracts", type=int, default=1000)
    parser.add_argument("--records", type=int, default=10_000_000)
    args = parser.parse_args()
    if args.contracts < 1 or args.records < args.contracts:
        parser.error("need at least one contract and at least one record per contract")
    use_fresh_database(BENCH_DB)
    run(args.contracts, args.records)


def _seed_contracts(count: int) -> list:
    from datetime import UTC, datetime
    from decimal import Decimal

    from accounts.models import Tenant
    from catalog.models import ComputePackage
    from contracts.models import Contract
    from sla.models import CreditStep, Objective, SlaPolicy

    package = ComputePackage.objects.create(code="bench-pkg", name="Bench package")
    policy = SlaPolicy.objects.create(name="Seed 000", package=package, time_zone="Asia/Shanghai")
    availability = Objective.objects.create(
        policy=policy, name="availability", kind="availability", target_percent=Decimal("99.9")
    )
    for below, credit in (("99.9", "10"), ("99", "25"), ("95", "100")):
        CreditStep.objects.create(
            objective=availability, below_percent=Decimal(below), credit_percent=Decimal(credit)
        )
    for layer, ms, target in (
        ("l1", "10", "99"),
        ("l2", "30", "99"),
        ("l3", "150", "99"),
        ("e2e", "200", "99.9"),
    ):
        Objective.objects.create(
            policy=policy,
            name=f"latency-{layer}",
            kind="latency",
            layer=layer,
            threshold_ms=Decimal(ms),
            target_percent=Decimal(target),
        )
    tenants = Tenant.objects.bulk_create(Tenant(code=f"bench-t-{i}", name=f"Bench {i}") for i in range(count))
    return Contract.objects.bulk_create(
        Contract(
            code=f"bench-c-{i}",
            tenant=tenant,
            package=package,
            currency="CNY",
            starts_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
        for i, tenant in enumerate(tenants)
    )


def run(contract_count: int, record_count: int) -> None:
    from datetime import UTC, datetime, timedelta

    from rich.console import Console

    from clickhouse_store import query
    from clickhouse_store.migrator import apply_migrations
    from common.periods import month_bounds
    from sla.services import compute_report
    from sla.tasks import evaluate_burn_rates_task

    console = Console()
    apply_migrations()
    contracts = _seed_contracts(contract_count)
    start, end = month_bounds("2026-11", "Asia/Shanghai")
    start_ns = int(start.timestamp()) * 10**9
    span = int((end - start).total_seconds()) * 10**9

    began = time.perf_counter()
    for offset in range(0, record_count, CHUNK):
        query.command(
            _INSERT,
            {
                "c": contract_count,
                "start": start_ns,
                "span": span,
                "permille": ERROR_PERMILLE,
                "offset": offset,
                "count": min(CHUNK, record_count - offset),
            },
        )
    load_s = time.perf_counter() - began
    (stored,) = query.select(f"SELECT count() FROM {query.RECORDS}")[0]
    console.print(f"generated {stored:,} records for {contract_count:,} contracts in {load_s:.1f} s")

    after = datetime(2026, 12, 2, tzinfo=UTC)
    began = time.perf_counter()
    reports = [compute_report(contract, "2026-11", now=after) for contract in contracts]
    reports_s = time.perf_counter() - began

    # The every-minute beat job, in the middle of the month: first run (opens alerts), then the next one.
    mid_month = datetime(2026, 11, 16, 12, tzinfo=UTC)
    began = time.perf_counter()
    open_alerts = evaluate_burn_rates_task(mid_month.isoformat())
    alerts_s = time.perf_counter() - began
    began = time.perf_counter()
    evaluate_burn_rates_task((mid_month + timedelta(minutes=1)).isoformat())
    next_s = time.perf_counter() - began

    began = time.perf_counter()
    query.select("SELECT quantileExact(0.99)(end_ns - start_ns) FROM usage_records")
    bare_s = time.perf_counter() - began

    began = time.perf_counter()
    query.select(
        "SELECT contract, count(), countIf(status = 'ok'), "
        "quantilesExact(0.5, 0.9, 0.95, 0.99, 0.999)(intDiv(end_ns - start_ns, 1000)), "
        "quantilesExact(0.5, 0.9, 0.95, 0.99, 0.999)(l1_latency_us), "
        "quantilesExact(0.5, 0.9, 0.95, 0.99, 0.999)(l2_latency_us), "
        "quantilesExact(0.5, 0.9, 0.95, 0.99, 0.999)(l3_latency_us) "
        "FROM usage_records GROUP BY contract"
    )
    grouped_s = time.perf_counter() - began

    credits: dict[str, int] = {}
    for report in reports:
        key = format(report.credit_percent.normalize(), "f")
        credits[key] = credits.get(key, 0) + 1
    console.print(
        f"compute_report for {contract_count:,} contracts: {reports_s:.2f} s "
        f"({1000 * reports_s / contract_count:.1f} ms per contract)"
    )
    console.print(
        f"beat job (burn rates + health, {contract_count:,} contracts): first run {alerts_s:.2f} s, "
        f"{open_alerts:,} alerts open; next run {next_s:.2f} s"
    )
    console.print(f"bare quantileExact(0.99) over all records: {bare_s:.3f} s")
    console.print(f"bare GROUP BY contract with 4 × quantilesExact: {grouped_s:.3f} s")
    console.print(
        f"ratio reports / bare percentile: {reports_s / bare_s:.1f}×; "
        f"reports / bare GROUP BY: {reports_s / grouped_s:.1f}×"
    )
    console.print(f"contracts by credit %: {dict(sorted(credits.items(), key=lambda kv: float(kv[0])))}")


if __name__ == "__main__":
    main()
