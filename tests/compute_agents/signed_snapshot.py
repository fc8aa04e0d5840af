"""An entitlement snapshot the tests sign as the platform would (the platform key is theirs), loaded the
way an agent loads its cached copy while the platform is unreachable; and a real agent (torch engine,
durable spool) serving it. For keys whose fields the tests choose freely, without a live platform."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from compute_agents.engine import Engine
from compute_agents.entitlements import EntitlementStore
from compute_agents.metrics import AgentMetrics
from compute_agents.onnx_executor import OnnxExecutor
from compute_agents.router import Rules
from compute_agents.service import AgentIdentity, AgentService
from compute_agents.spool import Spool
from compute_agents.tree.decision import DecisionReader
from treemeter_records import private_key_from_seed, protocol

PLATFORM = private_key_from_seed(os.urandom(32))


def snapshot_key(
    api_key: str,
    *,
    package: str = "review",
    status: str = "active",
    quota: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One key's entry in the snapshot (``extra``: fields such as ``models``)."""
    return {
        "key_hash": protocol.api_key_hash(api_key),
        "prefix": api_key[:12],
        "tenant": "acme",
        "contract": "acme-2026",
        "package": package,
        "sla_class": "gold",
        "quota_tokens": quota,
        "quota_period": "month",
        "status": status,
        **extra,
    }


def signed_store(directory: Path, agent_id: str, keys: list[dict[str, Any]]) -> EntitlementStore:
    """A real signed snapshot of ``keys`` for ``agent_id``, from its disk cache (the platform unreachable)."""
    snapshot = {
        "v": 1,
        "agent_id": agent_id,
        "issued_ns": time.time_ns(),
        "refresh_s": 30,
        "keys": keys,
    }
    directory.mkdir(parents=True, exist_ok=True)
    cache = directory / "entitlements.json"
    cache.write_text(
        json.dumps({"snapshot": snapshot, "signature": protocol.sign_snapshot(PLATFORM, snapshot)})
    )
    store = EntitlementStore(
        "http://127.0.0.1:9", agent_id, private_key_from_seed(os.urandom(32)), PLATFORM.public_key(), cache
    )
    store.start()
    store.stop()
    return store


def local_agent(
    engine: Engine,
    directory: Path,
    agent_id: str,
    keys: list[dict[str, Any]],
    *,
    key: Ed25519PrivateKey | None = None,
    decisions: DecisionReader | None = None,
    onnx: OnnxExecutor | None = None,
) -> AgentService:
    """The agent's request path on ``engine`` with a signed snapshot of ``keys`` and a durable spool;
    behind a router with ``decisions`` (and its ``key``, which signs the v2 records)."""
    store = signed_store(directory, agent_id, keys)
    spool = Spool(directory / "spool.sqlite3")
    return AgentService(
        AgentIdentity(agent_id, node=f"{agent_id}.l3", cache_node=f"{agent_id}.l2", key=key),
        engine,
        spool,
        store,
        Rules.load(None),
        AgentMetrics(spool.status, store.age_s),
        decisions=decisions,
        onnx=onnx,
    )
