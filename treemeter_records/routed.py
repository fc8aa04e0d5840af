"""Record format v2's signatures: the executor signs its record, and both that signature and the
router's decision inside it are checked against registered keys (at ingest, and offline by
``treemeter-verify``, which carries its own copy of these rules).

The executor's signature covers ``RECORD_DOMAIN`` + the canonical bytes of the record without its
``executor_sig`` member. In a canonical line that member sits between ``end_ns`` and
``expert_cache_hits`` (keys are sorted) and holds no brace, so ``line_signing_bytes`` cuts it out of
the line itself; ``record_signing_bytes`` gives the same bytes from a dict.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .encoding import canonical_bytes
from .errors import DECISION_SIGNATURE_INVALID, EXECUTOR_SIGNATURE_INVALID, RecordError
from .protocol import verify_decision
from .signing import key_id_for
from .validation import RECORD_VERSION_V2, validate_record

RECORD_DOMAIN = b"treemeter-record-v2\n"
_MEMBER = b',"executor_sig":{'


def record_signing_bytes(record: dict[str, Any]) -> bytes:
    return RECORD_DOMAIN + canonical_bytes({k: v for k, v in record.items() if k != "executor_sig"})


def line_signing_bytes(line: bytes) -> bytes:
    """What the executor signed, cut from a canonical v2 line (``ValueError`` when it has no signature)."""
    start = line.index(_MEMBER)
    end = line.index(b"}", start + len(_MEMBER)) + 1
    return RECORD_DOMAIN + line[:start] + line[end:]


def sign_record(record: dict[str, Any], decision: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """The v2 record of a v1 ``record`` (``make_record``'s) that a router decided: with the router's
    ``decision`` as received and the executor's signature, validated."""
    unsigned = {**record, "v": RECORD_VERSION_V2, "decision": decision}
    signature = key.sign(record_signing_bytes(unsigned))
    signed = {**unsigned, "executor_sig": {"key_id": key_id_for(key), "sig": _b64(signature)}}
    validate_record(signed)
    return signed


def check_record_signatures(
    signed_bytes: bytes,
    executor_sig: dict[str, Any],
    decision: dict[str, Any],
    executor_key: Ed25519PublicKey,
    router_key: Ed25519PublicKey,
) -> None:
    """Raise ``RecordError`` unless the executor's signature over ``signed_bytes`` and the router's
    decision verify under the keys given (their key ids too)."""
    if executor_sig["key_id"] != key_id_for(executor_key) or not _verifies(
        executor_key, executor_sig["sig"], signed_bytes
    ):
        raise RecordError(
            EXECUTOR_SIGNATURE_INVALID, "executor_sig", "the executor's signature does not verify"
        )
    if not verify_decision(router_key, decision):
        raise RecordError(
            DECISION_SIGNATURE_INVALID, "decision", "the router's decision does not verify under its key"
        )


def _verifies(key: Ed25519PublicKey, signature_b64: str, message: bytes) -> bool:
    try:
        key.verify(base64.b64decode(signature_b64, validate=True), message)
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
