"""Record validation per record: the reference definition against the compiled fast path.

    .venv/bin/python bench/validation.py [--records 20000]

Synthetic records (16 experts, 5 hops, ~1.46 kB) as canonical lines. Prints µs/record for
`treemeter_records.decode_record` (orjson dicts, Python rules, canonical re-encoding) and for
`treemeter_records.fast_record` (msgspec Structs from the raw line), with their results dropped at once
and kept (as ingest keeps a batch's records), and kept beside 2 million live objects (a server's heap): the
reference's dicts are walked by the garbage collector, the fast path's Structs are not tracked.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[0:1] = [str(ROOT), str(ROOT / "platform")]

from compute_agents.synthetic import Workload, synthetic_records  # noqa: E402 - needs the path above
from treemeter_records import canonical_bytes, decode_record, fast_record  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args()
    workload = Workload("bench-agent", "bench-tenant", "bench-contract", "bench.package")
    start = 1_700_000_000 * 10**9
    records = synthetic_records(
        workload, first_seq=0, count=args.records, start_ns=start, end_ns=start + 10**13
    )
    lines = [canonical_bytes(r) for r in records]
    assert all(fast_record(line) is not None for line in lines)
    paths: dict[str, Callable[[bytes], Any]] = {"reference": decode_record, "fast path": fast_record}
    print(f"{len(lines):,} records, µs/record")
    rows: dict[str, list[float]] = {name: [] for name in paths}
    for name, path in paths.items():
        rows[name].append(_timed(partial(_drop, path, lines), len(lines)))
        rows[name].append(_timed(partial(_keep, path, lines), len(lines)))
    heap = [{"a": [i]} for i in range(2_000_000)]
    for name, path in paths.items():
        rows[name].append(_timed(partial(_keep, path, lines), len(lines)))
    del heap
    print(f"{'':<10} {'dropped':>9} {'kept':>9} {'kept, big heap':>15}")
    for name, (dropped, kept, big) in rows.items():
        print(f"{name:<10} {dropped:>9.2f} {kept:>9.2f} {big:>15.2f}")
    ref, fast = rows["reference"], rows["fast path"]
    print("reference ÷ fast path: " + ", ".join(f"{r / f:.2f}" for r, f in zip(ref, fast, strict=True)))


def _drop(path: Callable[[bytes], Any], lines: list[bytes]) -> None:
    for line in lines:
        path(line)


def _keep(path: Callable[[bytes], Any], lines: list[bytes]) -> list[Any]:
    return [path(line) for line in lines]


def _timed(run: Callable[[], Any], count: int) -> float:
    began = time.perf_counter()
    run()
    return (time.perf_counter() - began) / count * 1e6


if __name__ == "__main__":
    main()
