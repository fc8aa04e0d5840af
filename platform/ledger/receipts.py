"""A customer's receipt checked against the log (treemeter_records.receipts): was the request it names
logged as the leaf the agent promised, and where is the proof.

The answer's ``status``:

- ``included``: logged with the receipt's leaf hash and inside the latest signed checkpoint; the
  inclusion proof comes with it;
- ``logged``: logged with the receipt's leaf hash, after the latest checkpoint (ask again later);
- ``pending``: not in the log yet, and the contract's grace period for its month still runs;
- ``missing``: not in the log, and the grace period is over: the receipt is evidence (a dispute);
- ``mismatch``: the log holds the record id with another leaf hash: evidence too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from agents.selectors import agent_scope, key_with_agent
from clickhouse_store.queries.records import record_of
from common.periods import month_bounds, month_of
from contracts.models import Contract
from treemeter_records import canonical_bytes, public_key_from_b64
from treemeter_records.receipts import Receipt, ReceiptError, read_receipt, verify_receipt
from treemeter_records.timeutil import from_unix_nanos

from .models import LogLeaf
from .selectors import LedgerLookupError, inclusion_proof

RECEIPT_STATUSES = ("included", "logged", "pending", "missing", "mismatch")
EVIDENCE_STATUSES = ("missing", "mismatch")


@dataclass(frozen=True)
class ReceiptCheck:
    receipt: Receipt
    status: str
    grace_ends: datetime
    record: dict[str, Any] | None  # the stored record, as its canonical line's JSON
    line: str | None  # its canonical line: SHA-256(0x00 ‖ line) is the receipt's leaf hash
    inclusion: dict[str, Any] | None

    @property
    def is_evidence(self) -> bool:
        return self.status in EVIDENCE_STATUSES

    def as_json(self) -> dict[str, Any]:
        return {
            "claims": self.receipt.claims,
            "key_id": self.receipt.key_id,
            "status": self.status,
            "grace_ends": self.grace_ends.isoformat(),
            "record": self.record,
            "line": self.line,
            "inclusion": self.inclusion,
        }


def _signed(receipt: Receipt) -> None:
    """The receipt must be signed by the key it names, of the agent it names (revoked keys too: a
    receipt signed before the revocation stays evidence), an agent bound to the receipt's contract."""
    claims = receipt.claims
    key = key_with_agent(receipt.key_id)
    if key is None or key.agent.agent_id != claims["agent_id"]:
        raise LedgerLookupError(400, "invalid_receipt", f"Key {receipt.key_id} is not a key of that agent.")
    if not verify_receipt(receipt, public_key_from_b64(key.public_key)):
        raise LedgerLookupError(400, "invalid_receipt", "The receipt's signature does not verify.")
    if not agent_scope(key.agent_id).allows(claims["tenant"], claims["contract"]):
        raise LedgerLookupError(
            400,
            "invalid_receipt",
            f"Agent {claims['agent_id']} does not serve contract {claims['contract']}.",
        )


def grace_ends(contract: Contract | None, start_ns: int) -> datetime:
    """When the contract's grace for late records of the receipt's month ends (UTC months, no grace for
    a contract the platform does not know)."""
    month = month_of(from_unix_nanos(start_ns))
    days = contract.grace_days if contract is not None else 0
    return month_bounds(month)[1] + timedelta(days=days)


def check_receipt(token: str, tenant: str | None) -> ReceiptCheck:
    """Check a receipt for ``tenant`` (None: staff, any tenant's). 400 ``invalid_receipt`` for a token that
    is not a receipt or not signed by its agent; 404 ``unknown_receipt`` for another tenant's."""
    try:
        receipt = read_receipt(token)
    except ReceiptError as error:
        raise LedgerLookupError(400, "invalid_receipt", str(error)) from None
    claims = receipt.claims
    if tenant is not None and claims["tenant"] != tenant:
        raise LedgerLookupError(404, "unknown_receipt", "No receipt of yours names that record.")
    _signed(receipt)
    contract = Contract.objects.filter(code=claims["contract"], tenant__code=claims["tenant"]).first()
    ends = grace_ends(contract, claims["start_ns"])
    leaf = LogLeaf.objects.filter(record_id=receipt.record_id, tenant=claims["tenant"]).first()
    if leaf is None:
        status = "missing" if timezone.now() >= ends else "pending"
        return ReceiptCheck(receipt, status, ends, None, None, None)
    if bytes(leaf.leaf_hash) != receipt.leaf_hash:
        return ReceiptCheck(receipt, "mismatch", ends, None, None, None)
    record = record_of(receipt.record_id, claims["tenant"])
    line = canonical_bytes(record).decode() if record is not None else None
    try:
        inclusion = inclusion_proof(receipt.record_id, None, claims["tenant"])
    except LedgerLookupError:  # logged after the latest checkpoint, or none published yet
        return ReceiptCheck(receipt, "logged", ends, record, line, None)
    return ReceiptCheck(receipt, "included", ends, record, line, inclusion)
