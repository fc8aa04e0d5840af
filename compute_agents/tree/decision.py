"""The router's signed decision as it travels to the executor: one header, ``x-treemeter-decision``,
holding the base64url of the canonical JSON of ``{"claims", "key_id", "sig"}``
(``treemeter_records.protocol.sign_decision``). The executor checks the signature against the router key
it pinned, that the decision names it, that it is fresh and that its record id was not used before; the
claims then set its record's id, start, path and L1 hop.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from treemeter_records import RecordError, canonical_bytes, protocol
from treemeter_records.validation import FALLBACK_FROM, QUEUED_US, SUPERSEDES, check_claims, receipt_ns

from ..router import Decision
from ..wire import ApiError

DECISION_HEADER = "x-treemeter-decision"
MAX_AGE_NS = 60 * 10**9  # a decision older than this is refused: no replays of old decisions
MAX_HEADER_BYTES = 8192


@dataclass(frozen=True)
class Routed:
    """A decision the executor accepted, with when it arrived (for the network and queue time)."""

    decision: dict[str, Any]
    arrived_ns: int

    @property
    def claims(self) -> dict[str, Any]:
        return self.decision["claims"]

    @property
    def start_ns(self) -> int:
        """When the router received the request (a queued job: before its queue wait): the record's start."""
        return receipt_ns(self.claims)

    @property
    def transit_us(self) -> int:
        """Network and queue time from the router's send to the executor's read of the request."""
        return max(0, (self.arrived_ns - int(self.claims["decided_ns"])) // 1000)


def decision_claims(
    *,
    record_id: str,
    router: str,
    node: str,
    rules_sha256: str,
    decision: Decision,
    executor: str,
    l1_in_us: int,
    preheat: list[list[int]],
    supersedes: tuple[str, ...] = (),
    queued_us: int = 0,
) -> dict[str, Any]:
    confidence = None if decision.confidence is None else round(decision.confidence * 1_000_000)
    claims: dict[str, Any] = {
        "record_id": record_id,
        "router": router,
        "node": node,
        "rules_sha256": rules_sha256,
        "domain": decision.domain,
        "confidence_ppm": confidence,
        "l2_confirmation": decision.l2_confirmation,
        "path": list(decision.path),
        "subtree": decision.subtree,
        "executor": executor,
        "preheat": preheat,
        "l1_in_us": l1_in_us,
        "decided_ns": time.time_ns(),
    }
    if supersedes:
        claims[SUPERSEDES] = list(supersedes)
    if queued_us:
        claims[QUEUED_US] = queued_us
    if decision.fallback_from is not None:
        claims[FALLBACK_FROM] = decision.fallback_from
    return claims


def encode_decision(claims: dict[str, Any], key: Ed25519PrivateKey) -> str:
    return base64.urlsafe_b64encode(canonical_bytes(protocol.sign_decision(key, claims))).decode("ascii")


class DecisionReader:
    """An executor's check of the decisions its router sends: signed by the pinned router key, naming
    this executor, at most ``MAX_AGE_NS`` old, and each record id once (a replayed header within the
    window is refused, so one decision never yields two records)."""

    def __init__(self, router_key: Ed25519PublicKey, executor: str) -> None:
        self.router_key = router_key
        self.executor = executor
        self._seen: OrderedDict[str, int] = OrderedDict()  # record id → decided_ns, oldest first
        self._lock = threading.Lock()

    def read(self, header: str | None) -> Routed:
        arrived = time.time_ns()
        if not header:
            raise _refused("decision_missing", "This executor serves only requests routed by its L1 router.")
        decision = self._decode(header)
        claims = decision["claims"]
        if claims["executor"] != self.executor:
            raise _refused("decision_misrouted", "The routing decision names another executor.")
        if abs(arrived - claims["decided_ns"]) > MAX_AGE_NS:
            raise _refused("decision_expired", "The routing decision is too old.")
        self._first_use(claims["record_id"], claims["decided_ns"], arrived)
        return Routed(decision, arrived)

    def _decode(self, header: str) -> dict[str, Any]:
        try:
            if len(header) > MAX_HEADER_BYTES:
                raise ValueError("the header is too long")
            decision = orjson.loads(base64.urlsafe_b64decode(header.encode("ascii")))
        except (ValueError, binascii.Error, UnicodeEncodeError) as error:
            raise _refused("decision_invalid", f"The routing decision cannot be read: {error}") from None
        if not protocol.verify_decision(self.router_key, decision):
            raise _refused(
                "decision_invalid", "The routing decision does not verify against the router's key."
            )
        try:
            check_claims(decision["claims"])
        except RecordError as error:
            raise _refused(
                "decision_invalid", f"The routing decision's claims are malformed: {error.message}"
            ) from None
        return decision

    def _first_use(self, record_id: str, decided_ns: int, now_ns: int) -> None:
        with self._lock:
            while self._seen and next(iter(self._seen.values())) < now_ns - 2 * MAX_AGE_NS:
                self._seen.popitem(last=False)
            if record_id in self._seen:
                raise ApiError(
                    409,
                    "invalid_request_error",
                    "decision_replayed",
                    "This routing decision was already served.",
                )
            self._seen[record_id] = decided_ns


def _refused(code: str, message: str) -> ApiError:
    return ApiError(403, "invalid_request_error", code, message)
