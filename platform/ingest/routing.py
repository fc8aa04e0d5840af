"""Ingest's check of record format v2, the serving tree's records: the executor's signature over its
record is made with the key that signed the batch, and the router's decision inside it was signed by
a registered, active L1 router bound to the record's contract. Both signatures are verified here
(``treemeter_records.check_record_signatures``); the record's agreement with its decision was
checked with its format. A v1 record passes untouched."""

from __future__ import annotations

import base64

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agents.models import Agent, AgentKey
from agents.selectors import Scope, agent_scope, key_with_agent
from treemeter_records import RecordError, WireRecord, check_record_signatures, line_signing_bytes

from . import rejections

Problem = tuple[str, str, str]  # (code, field, message)


class RoutedRecords:
    """The v2 checks of one batch; router keys and scopes are looked up once per batch."""

    def __init__(self, batch_key: AgentKey) -> None:
        self.batch_key = batch_key
        self.executor_key = _public(batch_key)
        self._routers: dict[str, tuple[AgentKey, Scope, Ed25519PublicKey] | None] = {}

    def problem(self, record: WireRecord, line: bytes) -> Problem | None:
        decision, signature = record.decision, record.executor_sig
        if decision is None or signature is None:
            return None
        if signature.key_id != self.batch_key.key_id:
            message = f"The record is signed with {signature.key_id}, not with the batch's key."
            return ("executor_signature_invalid", "executor_sig.key_id", message)
        router = self._router(decision.key_id)
        claims = decision.claims
        if router is None or router[0].agent.agent_id != claims.router:
            message = f"No registered L1 router {claims.router} holds key {decision.key_id}."
            return (rejections.UNKNOWN_ROUTER_KEY, "decision.key_id", message)
        key, scope, public = router
        if key.revoked_at is not None or not key.agent.active:
            message = f"Router key {key.key_id} was revoked or its router disabled."
            return (rejections.ROUTER_KEY_REVOKED, "decision.key_id", message)
        if not scope.allows(record.tenant, record.contract):
            message = (
                f"Router {claims.router} is not bound to tenant {record.tenant} / contract {record.contract}."
            )
            return (rejections.ROUTER_NOT_BOUND, "decision.claims.router", message)
        try:
            check_record_signatures(
                line_signing_bytes(line),
                msgspec.to_builtins(signature),
                msgspec.to_builtins(decision),
                self.executor_key,
                public,
            )
        except RecordError as error:
            return (error.code, error.field or "", error.message)
        return None

    def _router(self, key_id: str) -> tuple[AgentKey, Scope, Ed25519PublicKey] | None:
        if key_id not in self._routers:
            key = key_with_agent(key_id)
            is_router = key is not None and key.agent.kind == Agent.Kind.ROUTER
            self._routers[key_id] = (
                (key, agent_scope(key.agent_id), _public(key)) if key and is_router else None
            )
        return self._routers[key_id]


def _public(key: AgentKey) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(key.public_key))
