"""Per-request receipts: what the serving side hands the customer with every metered answer.

A receipt names the record the answer was metered as and the leaf it becomes in the log, signed by the
agent that spooled it, so the customer can later prove "this request was served and metered as this
leaf" without trusting the platform's word:

- claims: ``{"v": 1, "record_id", "agent_id", "seq", "leaf_hash" (hex SHA-256(0x00 ‖ canonical record)),
  "tenant", "contract", "start_ns"}``; tenant, contract and start say whose it is and which period's
  grace it falls in, even when the platform never logged the record;
- signature: Ed25519 by the agent key over ``RECEIPT_DOMAIN + canonical_bytes(claims)``;
- the token: unpadded base64url of ``canonical_bytes({"claims", "key_id", "sig"})``, sent in the
  ``Treemeter-Receipt`` header and in the answer's ``treemeter.receipt`` (a stream's last finish chunk).

``treemeter-verify receipt`` keeps its own implementation of this (verifier/treemeter_verify/receipts.py);
tests/receipt_vectors.json pins both.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .encoding import canonical_bytes
from .merkle import leaf_hash
from .signing import key_id_for

RECEIPT_VERSION = 1
RECEIPT_DOMAIN = b"treemeter-receipt-v1\n"
RECEIPT_HEADER = "Treemeter-Receipt"
RECEIPT_MAX_CHARS = 2048  # a token is ~450 characters; anything far longer is refused unread
CLAIMS = ("v", "record_id", "agent_id", "seq", "leaf_hash", "tenant", "contract", "start_ns")


class ReceiptError(ValueError):
    """The text is not a receipt (its shape); a receipt whose signature fails is checked by
    ``verify_receipt``."""


@dataclass(frozen=True)
class Receipt:
    claims: dict[str, Any]
    key_id: str
    signature: bytes

    @property
    def record_id(self) -> str:
        return str(self.claims["record_id"])

    @property
    def leaf_hash(self) -> bytes:
        return bytes.fromhex(self.claims["leaf_hash"])


def make_receipt(key: Ed25519PrivateKey, record: dict[str, Any], line: bytes) -> str:
    """The receipt token of a spooled record and its canonical ``line`` (the bytes the log will hash),
    signed by the agent key that will sign its batch."""
    claims = {
        "v": RECEIPT_VERSION,
        "record_id": record["record_id"],
        "agent_id": record["agent_id"],
        "seq": record["seq"],
        "leaf_hash": leaf_hash(line).hex(),
        "tenant": record["tenant"],
        "contract": record["contract"],
        "start_ns": record["start_ns"],
    }
    signature = key.sign(RECEIPT_DOMAIN + canonical_bytes(claims))
    envelope = {
        "claims": claims,
        "key_id": key_id_for(key),
        "sig": base64.b64encode(signature).decode("ascii"),
    }
    return base64.urlsafe_b64encode(canonical_bytes(envelope)).rstrip(b"=").decode("ascii")


def read_receipt(token: str) -> Receipt:
    """Parse a receipt token (surrounding whitespace allowed); ``ReceiptError`` names what is wrong."""
    text = token.strip()
    if not text or len(text) > RECEIPT_MAX_CHARS:
        raise ReceiptError(f"a receipt is 1 to {RECEIPT_MAX_CHARS} characters")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        envelope = orjson.loads(raw)
    except (binascii.Error, ValueError):
        raise ReceiptError("a receipt is base64url of a JSON object") from None
    if not isinstance(envelope, dict) or set(envelope) != {"claims", "key_id", "sig"}:
        raise ReceiptError("a receipt holds exactly claims, key_id and sig")
    claims, key_id, sig = envelope["claims"], envelope["key_id"], envelope["sig"]
    if not isinstance(claims, dict) or tuple(sorted(claims)) != tuple(sorted(CLAIMS)):
        raise ReceiptError(f"a receipt's claims are exactly {', '.join(CLAIMS)}")
    if claims["v"] != RECEIPT_VERSION:
        raise ReceiptError(f"receipt version {claims['v']!r} is not {RECEIPT_VERSION}")
    texts = ("record_id", "agent_id", "leaf_hash", "tenant", "contract")
    if not all(isinstance(claims[name], str) for name in texts) or not isinstance(key_id, str):
        raise ReceiptError(f"a receipt's {', '.join(texts)} and key_id are strings")
    if not all(type(claims[name]) is int and claims[name] >= 0 for name in ("seq", "start_ns")):
        raise ReceiptError("a receipt's seq and start_ns are non-negative integers")
    try:
        leaf = bytes.fromhex(claims["leaf_hash"])
        signature = base64.b64decode(sig, validate=True) if isinstance(sig, str) else b""
    except (binascii.Error, ValueError):
        raise ReceiptError("a receipt's leaf_hash is hex and its sig base64") from None
    if len(leaf) != 32 or len(signature) != 64:
        raise ReceiptError("a receipt's leaf_hash is 32 bytes and its sig 64")
    return Receipt(claims, key_id, signature)


def verify_receipt(receipt: Receipt, public_key: Ed25519PublicKey) -> bool:
    """Whether ``public_key`` (the agent key the receipt names) signed the receipt's claims."""
    if key_id_for(public_key) != receipt.key_id:
        return False
    try:
        public_key.verify(receipt.signature, RECEIPT_DOMAIN + canonical_bytes(receipt.claims))
    except InvalidSignature:
        return False
    return True
