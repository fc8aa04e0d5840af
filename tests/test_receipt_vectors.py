"""Shared receipt vectors (tests/receipt_vectors.json): the platform's receipts (treemeter_records) and the
offline verifier's own reading of them (treemeter_verify) accept and refuse exactly the same tokens."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from treemeter_records import canonical_bytes, private_key_from_seed, public_key_from_b64
from treemeter_records import receipts as platform
from treemeter_verify import receipts as verifier
from treemeter_verify.keys import PinnedKeys, agent_key_id
from treemeter_verify.note import NoteKey

VECTORS: dict[str, Any] = json.loads((Path(__file__).parent / "receipt_vectors.json").read_text())
RAW_KEY = base64.b64decode(VECTORS["agent_public_key"])
PINNED = PinnedKeys(
    platform=NoteKey("unused", b"\0" * 4, b"\0" * 32), agents={agent_key_id(RAW_KEY): RAW_KEY}
)


def test_the_platform_makes_exactly_the_vectors_token() -> None:
    key = private_key_from_seed(bytes.fromhex(VECTORS["agent_seed_hex"]))
    line = canonical_bytes(VECTORS["record"])
    assert platform.make_receipt(key, VECTORS["record"], line) == VECTORS["token"]
    assert hashlib.sha256(b"\x00" + line).hexdigest() == VECTORS["line_leaf_hash"]


def test_both_implementations_accept_the_token() -> None:
    receipt = platform.read_receipt(VECTORS["token"])
    assert platform.verify_receipt(receipt, public_key_from_b64(VECTORS["agent_public_key"]))
    assert receipt.claims["leaf_hash"] == VECTORS["line_leaf_hash"]
    envelope = verifier.read_receipt(VECTORS["token"])
    assert verifier.verify_signature_only(envelope, PINNED).ok
    assert envelope["claims"] == receipt.claims


@pytest.mark.parametrize("token", VECTORS["bad_signature"])
def test_both_refuse_a_claim_changed_after_signing(token: str) -> None:
    assert not platform.verify_receipt(
        platform.read_receipt(token), public_key_from_b64(VECTORS["agent_public_key"])
    )
    report = verifier.verify_signature_only(verifier.read_receipt(token), PINNED)
    assert [v.detail for v in report.verdicts if not v.ok] == [
        f"the signature by {agent_key_id(RAW_KEY)} does not verify"
    ]


@pytest.mark.parametrize("token", VECTORS["malformed"])
def test_both_refuse_what_is_not_a_receipt(token: str) -> None:
    with pytest.raises(platform.ReceiptError):
        platform.read_receipt(token)
    with pytest.raises(verifier.ReceiptError):
        verifier.read_receipt(token)
