"""The verifier's own pieces: canonical JSON, the record fast path, notes and keys, against the platform's."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.notes import CheckpointBody, sign_checkpoint, verifier_key
from tests.records.strategies import JSON_VALUES, records
from treemeter_records import canonical_bytes as platform_canonical
from treemeter_records import private_key_from_seed, public_key_bytes
from treemeter_verify.canonical import canonical_bytes
from treemeter_verify.check import FORMAT, read_export
from treemeter_verify.note import NoteError, open_checkpoint, parse_verifier_key
from treemeter_verify.records import _RECORD, fields_of, parse_record
from treemeter_verify.scan import RunsError, place_runs


@settings(max_examples=300)
@given(records(), st.booleans())
def test_the_fast_path_reads_exactly_what_a_json_parse_reads(record: dict[str, Any], verified: bool) -> None:
    if record["outcome"] is not None:
        record["outcome"]["verified"] = verified
    line = platform_canonical(record)
    assert _RECORD.fullmatch(line) is not None  # canonical records never need the slow path
    assert fields_of(line) == parse_record(line)


@given(records())
def test_a_non_canonical_line_takes_the_slow_path_with_the_same_result(record: dict[str, Any]) -> None:
    line = json.dumps(record, sort_keys=True, ensure_ascii=True).encode()  # spaces, escapes
    assert fields_of(line) == parse_record(line)


@given(JSON_VALUES)
def test_canonical_json_equals_the_record_format_definition(value: Any) -> None:
    assert canonical_bytes(value) == platform_canonical(value)


def test_floats_are_refused() -> None:
    with pytest.raises(ValueError, match="floats"):
        canonical_bytes({"a": [1.5]})


def test_checkpoint_notes_round_trip_and_refuse_other_keys() -> None:
    key, other = private_key_from_seed(bytes(32)), private_key_from_seed(bytes(range(32)))
    note = sign_checkpoint(CheckpointBody("log.example/x", 7, b"\x01" * 32), key)
    opened = open_checkpoint(note, parse_verifier_key(verifier_key("log.example/x", public_key_bytes(key))))
    assert (opened.origin, opened.size, opened.root_hash) == ("log.example/x", 7, b"\x01" * 32)
    with pytest.raises(NoteError, match="no signature of the pinned key"):
        open_checkpoint(note, parse_verifier_key(verifier_key("log.example/x", public_key_bytes(other))))
    forged = note.replace("\n7\n", "\n8\n")
    with pytest.raises(NoteError, match="does not verify"):
        open_checkpoint(forged, parse_verifier_key(verifier_key("log.example/x", public_key_bytes(key))))
    with pytest.raises(NoteError, match="key hash does not match"):
        parse_verifier_key("log.example/x+00000000+" + verifier_key("a", public_key_bytes(key)).split("+")[2])


def test_runs_are_placed_on_the_record_lines_and_checked() -> None:
    assert place_runs([[3, 10, 0, 5], [1, None, None, None], [2, 20, 1, 0]], 6) == [
        (0, 3, 10, 0, 5),
        (3, 1, None, None, None),
        (4, 2, 20, 1, 0),
    ]
    for runs, lines in (
        ([[3, 10, 0, 5]], 4),
        ([[0, 1, 0, 0]], 0),
        ([[1, 1, None, 0]], 1),
        ([[1, None, 0, 0]], 1),
    ):
        with pytest.raises(RunsError):
            place_runs(runs, lines)


@pytest.mark.parametrize("cut", [1, 30, 45])
def test_a_gzip_export_reads_as_its_bytes_in_one_member_or_several(cut: int) -> None:
    body = json.dumps({"format": FORMAT}).encode() + b"\nline-1\nline-2\n"
    for packed in (gzip.compress(body), gzip.compress(body[:cut]) + gzip.compress(body[cut:])):
        manifest, lines = read_export(packed)
        assert (manifest, list(lines)) == ({"format": FORMAT}, [b"line-1", b"line-2"])
