"""The verifier on record format v2 (routed records): the same figures as the v1 records they extend,
and the "routing decisions" check of the executor's signature, the router's decision and their
agreement. Exports are built by hand (one agent batch that the log holds entirely), since the record
lines, not the platform's ingest, are under test here."""

from __future__ import annotations

import base64
import json
import multiprocessing.pool
import signal
from collections.abc import Callable
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest

from ledger.notes import CheckpointBody, raw_public_key, sign_checkpoint, verifier_key
from tests.records.v2_example import CLAIMS, EXECUTOR_KEY, ROUTER_KEY, V1_PART, v2_record
from treemeter_records import (
    canonical_bytes,
    key_id_for,
    private_key_from_seed,
    protocol,
    record_signing_bytes,
    sign_header,
)
from treemeter_verify import PinnedKeys, Report, cli, scan, verify_export
from treemeter_verify.check import FORMAT, read_export
from treemeter_verify.keys import agent_key_id
from treemeter_verify.merkle import root_of_leaves
from treemeter_verify.note import parse_verifier_key
from treemeter_verify.records import _RECORD, fields_of

ORIGIN = "log.example/routed"
LOG_KEY = private_key_from_seed(bytes([7] * 32))
JAN_2025 = (1735689600 * 10**9, 1738368000 * 10**9)
V1_ID = "01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e10"
CHECK = "routing decisions"


def v1_record() -> dict[str, Any]:
    """A plain v1 record of the same agent, one seq later."""
    return {**V1_PART, "record_id": V1_ID, "seq": 8}


def resigned(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with a fresh executor signature over what it now holds."""
    signature = EXECUTOR_KEY.sign(record_signing_bytes(record))
    sig = {"key_id": key_id_for(EXECUTOR_KEY), "sig": base64.b64encode(signature).decode()}
    return {**record, "executor_sig": sig}


def decided(record: dict[str, Any], **claims: Any) -> dict[str, Any]:
    """``record`` with a router decision of other claims, signed by the router, and re-signed."""
    decision = protocol.sign_decision(ROUTER_KEY, {**CLAIMS, **claims})
    return resigned({**record, "decision": decision})


def export_of(records: list[dict[str, Any]]) -> tuple[dict[str, Any], list[bytes]]:
    """An export of ``records`` in one batch of their agent, a log of exactly them, a tokens_out line."""
    lines = [canonical_bytes(r) for r in sorted(records, key=lambda r: r["seq"])]
    leaves = [sha256(b"\x00" + line).digest() for line in lines]
    seqs = [r["seq"] for r in records]
    header = {
        "v": 1,
        "agent_id": V1_PART["agent_id"],
        "key_id": key_id_for(EXECUTOR_KEY),
        "first_seq": min(seqs),
        "last_seq": max(seqs),
        "count": len(lines),
        "merkle_root": root_of_leaves(leaves).hex(),
        "created_ns": 0,
    }
    tokens_out = sum(r["tokens_out"] for r in records if r["status"] == "ok")
    manifest = {
        "format": FORMAT,
        "invoice": {
            "tenant": V1_PART["tenant"],
            "contract": V1_PART["contract"],
            "period_start_ns": JAN_2025[0],
            "period_end_ns": JAN_2025[1],
            "currency": "CNY",
            "record_count": len(lines),
            "lines": [
                {"kind": "usage", "dimension": "tokens_out", "quantity": str(tokens_out), "amount": "0.16"}
            ],
        },
        "prices": {
            "tokens_out": {
                "charge_model": "per_unit",
                "included_quantity": str(tokens_out - 16),
                "properties": {"unit_price": "0.01"},
            }
        },
        "checkpoint": sign_checkpoint(CheckpointBody(ORIGIN, len(leaves), root_of_leaves(leaves)), LOG_KEY),
        "bundle": {"tree_size": len(leaves), "hashes": []},
        "batches": [
            {
                "header": canonical_bytes(header).decode(),
                "leaf_hashes": base64.b64encode(b"".join(leaves)).decode(),
                "signature": sign_header(header, EXECUTOR_KEY),
                "seqs": None,
            }
        ],
        "runs": [[len(lines), 0, 0, 0]],
    }
    return manifest, lines


def keys(*agents: Any) -> PinnedKeys:
    raw = [raw_public_key(a) for a in agents or (EXECUTOR_KEY, ROUTER_KEY)]
    platform = parse_verifier_key(verifier_key(ORIGIN, raw_public_key(LOG_KEY)))
    return PinnedKeys(platform=platform, agents={agent_key_id(k): k for k in raw})


def verdicts(report: Report) -> dict[str, tuple[bool, str]]:
    return {v.check: (v.ok, v.detail) for v in report.verdicts}


def routing(records: list[dict[str, Any]], pinned: PinnedKeys | None = None) -> tuple[bool, str]:
    """The routing verdict of an export of ``records``, whose other checks all pass."""
    manifest, lines = export_of(records)
    report = verify_export(manifest, lines, pinned or keys())
    failed = {name for name, (ok, _) in verdicts(report).items() if not ok}
    assert failed <= {CHECK}, report.verdicts
    return verdicts(report)[CHECK]


def test_a_v2_line_takes_the_slow_path_and_reads_as_the_v1_record_it_extends() -> None:
    v2_line, v1_line = canonical_bytes(v2_record()), canonical_bytes(V1_PART)
    assert _RECORD.fullmatch(v2_line) is None and _RECORD.fullmatch(v1_line) is not None
    assert fields_of(v2_line) == fields_of(v1_line)


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_export_with_a_routed_record_verifies(monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    monkeypatch.setattr(scan, "LINES_PER_JOB", 1)  # with jobs=2: one forked scanner per record
    manifest, lines = export_of([v2_record(), v1_record()])
    report = verify_export(manifest, lines, keys(), jobs=jobs)
    assert report.ok, report.verdicts
    assert verdicts(report)[CHECK] == (
        True,
        "1 routed records signed by their executors and pinned routers, as decided",
    )
    assert verdicts(report)["line usage tokens_out"] == (True, "32 × 0.01 = 0.16 CNY")


def test_forked_scanners_are_closed_when_done_not_terminated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Terminating the pool (SIGTERM to each scanner) hung, at random, a caller that ignores SIGTERM
    (or handles it without exiting, as a server's graceful stop does): its scanners inherit that, and
    one still waiting for work never ended. They are closed when done, and reset SIGTERM as they start."""
    terminated: list[object] = []
    terminate = multiprocessing.pool.Pool.terminate
    monkeypatch.setattr(multiprocessing.pool.Pool, "terminate", lambda pool: terminated.append(pool))
    monkeypatch.setattr(scan, "LINES_PER_JOB", 1)
    manifest, lines = export_of([v2_record(), v1_record()])
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        assert verify_export(manifest, lines, keys(), jobs=2).ok
    finally:
        signal.signal(signal.SIGTERM, previous)
        for pool in terminated:
            terminate(pool)  # type: ignore[arg-type]
    assert terminated == []


def test_an_export_without_routed_records_skips_the_check() -> None:
    manifest, lines = export_of([v1_record()])
    report = verify_export(manifest, lines, keys())
    assert report.ok
    skipped = [v for v in report.verdicts if v.check == CHECK]
    assert [(v.skipped, v.detail) for v in skipped] == [(True, "no routed (v2) records")]


RID = CLAIMS["record_id"]
CASES: dict[str, tuple[Callable[[], dict[str, Any]], str]] = {
    "tokens_out changed after the executor signed": (
        lambda: {**v2_record(), "tokens_out": 17},
        f"{RID}: executor signature does not verify",
    ),
    "a claim altered after the router signed": (
        lambda: resigned(_with_claims(v2_record(), confidence_ppm=999_999)),
        f"{RID}: router signature does not verify",
    ),
    "a decision for another executor": (
        lambda: decided(v2_record(), executor="gpu-08"),
        f"{RID}: the decision names another executor",
    ),
    "a start that is not the router's receipt": (
        lambda: decided(v2_record(), l1_in_us=851),
        f"{RID}: start_ns is not decided_ns - l1_in_us × 1000",
    ),
    "hops off the decided path": (
        lambda: decided(v2_record(), path=["L1", "L3", "L1"]),
        f"{RID}: the hops do not follow the decided path",
    ),
    "an L1 hop on another node": (
        lambda: decided(v2_record(), node="l1.0000000000000000"),
        f"{RID}: an L1 hop is not on the router's node",
    ),
    "a decision without its signature": (
        lambda: resigned({**v2_record(), "decision": {"claims": CLAIMS}}),
        f"{RID}: router signature is malformed",
    ),
}


def _with_claims(record: dict[str, Any], **claims: Any) -> dict[str, Any]:
    decision = record["decision"]
    return {**record, "decision": {**decision, "claims": {**decision["claims"], **claims}}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_routed_record_that_fails_is_named(case: str) -> None:
    make, problem = CASES[case]
    assert routing([make(), v1_record()]) == (False, problem)


def test_a_decision_of_an_unpinned_router_fails() -> None:
    ok, detail = routing([v2_record()], keys(EXECUTOR_KEY))
    assert (ok, detail) == (False, f"{RID}: router key {key_id_for(ROUTER_KEY)} is not pinned")


def test_the_console_script_reports_the_routing_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, lines = export_of([v2_record()])
    export, pinned = tmp_path / "export.ndjson", tmp_path / "keys.json"
    export.write_bytes(b"\n".join([json.dumps(manifest).encode(), *lines]) + b"\n")
    read_manifest, read_lines = read_export(export.read_bytes())
    assert (read_manifest, list(read_lines)) == (manifest, lines)
    agents = [base64.b64encode(raw_public_key(k)).decode() for k in (EXECUTOR_KEY, ROUTER_KEY)]
    pinned.write_text(
        json.dumps({"platform": verifier_key(ORIGIN, raw_public_key(LOG_KEY)), "agents": agents})
    )
    assert cli.main([str(export), "--keys", str(pinned), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert f"PASS  {CHECK}: 1 routed records" in out
    export.write_bytes(export.read_bytes().replace(b'"tokens_out":16', b'"tokens_out":17'))
    assert cli.main([str(export), "--keys", str(pinned), "--jobs", "1"]) == 1
    assert f"FAIL  {CHECK}: {RID}: executor signature does not verify" in capsys.readouterr().out
