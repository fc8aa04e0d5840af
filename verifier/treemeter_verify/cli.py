"""treemeter-verify EXPORT --keys KEYS [--previous CHECKPOINT]: a verdict per check, exit 1 on failure.

treemeter-verify receipt RECEIPT --keys KEYS [--proof ANSWER | --export EXPORT]: a request's receipt
(the token, or a file holding it): its signature, and with a proof (the answer of POST
/v1/ledger/receipts/check) or an invoice export, its record's inclusion in a signed checkpoint; prints
the record's billed dimensions."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .check import ExportError, Report, read_export, verify_export
from .keys import load_keys
from .note import NoteError
from .receipts import (
    billed_dimensions,
    read_receipt,
    verify_signature_only,
    verify_with_export,
    verify_with_proof,
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["receipt"]:
        return receipt_main(argv[1:])
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
    _print(report)
    elapsed = time.perf_counter() - started
    print(f"{'VERIFIED' if report.ok else 'NOT VERIFIED'}: {report.records} records in {elapsed:.2f} s")
    return 0 if report.ok else 1


def _print(report: Report) -> None:
    for verdict in report.verdicts:
        status = "SKIP" if verdict.skipped else "PASS" if verdict.ok else "FAIL"
        print(f"{status}  {verdict.check}: {verdict.detail}")


def _token(argument: str) -> str:
    """The receipt argument: a file's content, or else the token itself."""
    try:
        return Path(argument).read_text()
    except (OSError, ValueError):  # no such file, or a name too long to be one: the token
        return argument


def receipt_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="treemeter-verify receipt", description=__doc__)
    parser.add_argument("receipt", help="the Treemeter-Receipt token, or a file holding it")
    parser.add_argument("--keys", type=Path, required=True, help="pinned platform and agent keys (JSON)")
    proof = parser.add_mutually_exclusive_group()
    proof.add_argument("--proof", type=Path, help="the answer of POST /v1/ledger/receipts/check (JSON)")
    proof.add_argument("--export", type=Path, help="an invoice export holding the record")
    args = parser.parse_args(argv)
    try:
        keys = load_keys(args.keys)
        receipt = read_receipt(_token(args.receipt))
        if args.proof is not None:
            report, line = verify_with_proof(receipt, json.loads(args.proof.read_text()), keys)
        elif args.export is not None:
            report, line = verify_with_export(receipt, args.export.read_bytes(), keys)
        else:
            report, line = verify_signature_only(receipt, keys), None
    except (OSError, ValueError, ExportError, NoteError) as error:
        print(f"treemeter-verify: cannot verify: {error}", file=sys.stderr)
        return 2
    _print(report)
    if line is not None and report.ok:
        for name, value in billed_dimensions(line):
            print(f"      {name:<27} {value}")
    what = "RECEIPT SIGNED" if args.proof is None and args.export is None else "RECEIPT VERIFIED"
    print(what if report.ok else "RECEIPT NOT VERIFIED")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
