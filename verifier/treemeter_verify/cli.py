"""treemeter-verify EXPORT --keys KEYS [--previous CHECKPOINT]: a verdict per check, exit 1 on failure."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .check import ExportError, read_export, verify_export
from .keys import load_keys
from .note import NoteError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="treemeter-verify", description=__doc__)
    parser.add_argument(
        "export", type=Path, help="invoice export (NDJSON) from /v1/ledger/invoices/<id>/export"
    )
    parser.add_argument("--keys", type=Path, required=True, help="pinned platform and agent keys (JSON)")
    parser.add_argument(
        "--previous", type=Path, help="a signed checkpoint saved earlier, to check consistency"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes scanning records")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        keys = load_keys(args.keys)
        previous = args.previous.read_text() if args.previous else None
        manifest, lines = read_export(args.export.read_bytes())
        report = verify_export(manifest, lines, keys, previous, jobs=args.jobs)
    except (OSError, ValueError, ExportError, NoteError) as error:
        print(f"treemeter-verify: cannot verify: {error}", file=sys.stderr)
        return 2
    for verdict in report.verdicts:
        status = "SKIP" if verdict.skipped else "PASS" if verdict.ok else "FAIL"
        print(f"{status}  {verdict.check}: {verdict.detail}")
    elapsed = time.perf_counter() - started
    print(f"{'VERIFIED' if report.ok else 'NOT VERIFIED'}: {report.records} records in {elapsed:.2f} s")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
