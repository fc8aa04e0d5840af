"""Agent ↔ platform messages besides record batches (pure Python; the platform imports it too).

- Customer API keys are high-entropy random strings; only their SHA-256 travels and is stored.
- An agent authenticates a request to the platform by signing
  ``REQUEST_DOMAIN + "METHOD PATH\\nTIMESTAMP_NS"``
  with its Ed25519 key (headers below); the platform checks the key and a small time window. A request
  with a body (the quota lease calls) appends ``"\n" + hex SHA-256(body)``, so the body is signed too.
- The entitlement snapshot is signed by the platform's Ed25519 key over
  ``SNAPSHOT_DOMAIN + canonical_bytes(snapshot)``; agents verify it against the pinned platform key.
  A key whose contract package is in a gray release carries ``release``: ``{"plan", "stage", "models":
  [{"model_id", "hourly_cap", "plan_hourly_cap"}]}``: only those models are on, each capped per UTC hour
  at ``hourly_cap`` calls on this agent (its share of ``plan_hourly_cap``; null: no cap). Without
  ``release`` the key's package is fully released.
- An L1 router's routing decision travels to the executor it chose as
  ``{"claims": …, "key_id": …, "sig": …}``, signed by the router's key over
  ``DECISION_DOMAIN + canonical_bytes(claims)``; the executor verifies it against the router key it pinned.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .encoding import canonical_bytes
from .signing import key_id_for

API_KEY_PREFIX = "tmk_"
RELEASE_FIELDS = frozenset({"plan", "stage", "models"})  # a snapshot key's ``release`` (docstring)
SNAPSHOT_VERSION = 1
SNAPSHOT_DOMAIN = b"treemeter-entitlements-v1\n"
REQUEST_DOMAIN = b"treemeter-agent-request-v1\n"
DECISION_DOMAIN = b"treemeter-decision-v1\n"
SNAPSHOT_PATH = "/v1/entitlements/snapshot"
PLATFORM_KEY_PATH = "/v1/entitlements/platform-key"
LEASES_PATH = "/v1/entitlements/leases"
# A router's scheduler events (borrows, returns, scaling steps; docs/scheduler.md), signed like any agent
# request: ``{"events": [{"id", "kind", "at_ns", "subtree", "reason", "figures", "executor"?, "lender"?}]}``.
SCHEDULER_EVENTS_PATH = "/v1/agents/scheduler-events"
SCHEDULER_EVENTS_MAX = 500  # events in one post
# An agent that refused a checkpoint manifest (compute_agents.manifest_signature) says so before it exits,
# signed like any agent request: ``{"model_id", "reason", "key_id", "manifest_sha3", "refused_ns"}``.
MANIFEST_REFUSALS_PATH = "/v1/agents/manifest-refusals"
MANIFEST_REFUSAL_REASONS = ("unsigned", "malformed_signature", "unknown_key", "bad_signature")
HEADER_AGENT = "X-Treemeter-Agent"
HEADER_KEY_ID = "X-Treemeter-Key-Id"
HEADER_TIMESTAMP = "X-Treemeter-Timestamp"
HEADER_SIGNATURE = "X-Treemeter-Signature"


def api_key_hash(api_key: str) -> str:
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def lease_settle_path(lease_id: str) -> str:
    return f"{LEASES_PATH}/{lease_id}/settle"


def _request_message(method: str, path: str, timestamp_ns: int, body: bytes | None) -> bytes:
    message = f"{method.upper()} {path}\n{timestamp_ns}"
    if body is not None:
        message += "\n" + hashlib.sha256(body).hexdigest()
    return REQUEST_DOMAIN + message.encode()


def sign_request(
    key: Ed25519PrivateKey, method: str, path: str, timestamp_ns: int, body: bytes | None = None
) -> str:
    return base64.b64encode(key.sign(_request_message(method, path, timestamp_ns, body))).decode("ascii")


def verify_request(
    public_key: Ed25519PublicKey,
    signature_b64: str,
    method: str,
    path: str,
    timestamp_ns: int,
    body: bytes | None = None,
) -> bool:
    try:
        public_key.verify(
            base64.b64decode(signature_b64, validate=True),
            _request_message(method, path, timestamp_ns, body),
        )
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def signed_headers(
    key: Ed25519PrivateKey, agent_id: str, method: str, path: str, body: bytes | None = None
) -> dict[str, str]:
    """The headers that authenticate an agent's request to the platform, signed now."""
    now = time.time_ns()
    return {
        HEADER_AGENT: agent_id,
        HEADER_KEY_ID: key_id_for(key),
        HEADER_TIMESTAMP: str(now),
        HEADER_SIGNATURE: sign_request(key, method, path, now, body),
    }


def sign_snapshot(key: Ed25519PrivateKey, snapshot: dict[str, Any]) -> str:
    return base64.b64encode(key.sign(SNAPSHOT_DOMAIN + canonical_bytes(snapshot))).decode("ascii")


def verify_snapshot(public_key: Ed25519PublicKey, snapshot: dict[str, Any], signature_b64: str) -> bool:
    try:
        public_key.verify(
            base64.b64decode(signature_b64, validate=True), SNAPSHOT_DOMAIN + canonical_bytes(snapshot)
        )
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def sign_decision(key: Ed25519PrivateKey, claims: dict[str, Any]) -> dict[str, Any]:
    """A router's decision: its claims, the router's key id and the signature over both's domain."""
    signature = key.sign(DECISION_DOMAIN + canonical_bytes(claims))
    return {"claims": claims, "key_id": key_id_for(key), "sig": base64.b64encode(signature).decode("ascii")}


def verify_decision(public_key: Ed25519PublicKey, decision: Any) -> bool:
    """Whether ``decision`` has the signed shape and was signed by ``public_key`` (its key id too)."""
    if not isinstance(decision, dict) or set(decision) != {"claims", "key_id", "sig"}:
        return False
    claims, key_id, signature = decision["claims"], decision["key_id"], decision["sig"]
    if not isinstance(claims, dict) or key_id != key_id_for(public_key) or not isinstance(signature, str):
        return False
    try:
        message = DECISION_DOMAIN + canonical_bytes(claims)
        public_key.verify(base64.b64decode(signature, validate=True), message)
    except (InvalidSignature, binascii.Error, ValueError, TypeError):
        return False
    return True
