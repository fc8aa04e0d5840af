"""The benchmarks still run. Each bench script runs at its smallest size, in its own process, as its make
target runs it: it must exit 0 and print its last figure.

Nothing else runs the benches, so one can break unseen: `make bench` failed after the outbox's sandbox
insert took a keyword argument that the bench's timing wrapper did not pass on. The figures are not
checked here, since speed targets live in the benches themselves.

Left out: the benches that start servers of their own (`api_load`, `factory`, `ingest_scale`, `tree`),
at 25 s or more each even at their smallest size. Their code paths are tested elsewhere, through the
same servers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# bench → (its smallest arguments, a line it prints once all its figures are measured)
BENCHES: dict[str, tuple[list[str], str]] = {
    "ingest": (["--records", "200", "--sizes", "100", "--no-http"], "Ingest throughput, 200 records"),
    "validation": (["--records", "100"], "reference ÷ fast path:"),
    "verify": (["--records", "2000"], "append_batch itself:"),
    "invoice_run": (["--records", "20000", "--contracts", "10"], "targets: full run ÷ floor"),
    "sla_report": (["--records", "20000", "--contracts", "10"], "reports / bare GROUP BY:"),
    "scheduler_sim": (["--hours", "0.2"], "SLA met"),
    "classifier": (["--n", "20"], "held-out accuracy"),
    "agent_overhead": (["--requests", "2", "--max-tokens", "4", "--rounds", "1"], "L1 rules decision:"),
    "agent_concurrency": (
        ["--clients", "1,2", "--requests", "2", "--max-tokens", "4", "--rounds", "1"],
        "metering ms/request",
    ),
}


@pytest.mark.parametrize("bench", sorted(BENCHES))
def test_bench_runs_to_its_figures(bench: str, tmp_path: Path) -> None:
    arguments, last_figure = BENCHES[bench]
    # Its own chDB directory (one process may open a path, and this worker's is open here); each bench
    # makes its own PostgreSQL database.
    env = {
        **os.environ,
        "TREEMETER_DATA_DIR": str(tmp_path),
        "CLICKHOUSE_URL": f"chdb://{tmp_path}/clickhouse",
        "COLUMNS": "200",
    }
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{bench}.py"), *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert last_figure in run.stdout, run.stdout[-2000:]
