"""The agent's view of entitlements: pulled signed, cached on disk, usable while the platform is away."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from compute_agents.entitlements import EntitlementStore, SnapshotError
from entitlements.services import issue_api_key, revoke_api_key
from tests.compute_agents.agent_harness import start_agent
from tests.factories import ContractFactory
from treemeter_records import private_key_from_seed

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_cached_snapshot_serves_while_the_platform_is_unreachable(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, sla_class="gold").secret
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract])
    store = harness.agent.entitlements
    assert abs(store.clock_drift_us) < 1_000_000  # same host: the measured drift is tiny
    offline = EntitlementStore(
        "http://127.0.0.1:9",
        store.agent_id,
        store.agent_key,
        store.platform_key,
        store.cache_path,
    )
    offline.start()
    offline.stop()
    entitlement = offline.lookup(key)
    assert entitlement is not None
    assert (entitlement.tenant, entitlement.contract, entitlement.sla_class) == (
        contract.tenant.code,
        contract.code,
        "gold",
    )
    assert offline.lookup("tmk_other") is None


def test_a_tampered_cache_or_a_foreign_platform_key_is_refused(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    issue_api_key(contract_code=contract.code)
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract])
    store = harness.agent.entitlements
    envelope = json.loads(store.cache_path.read_text())
    envelope["snapshot"]["keys"][0]["quota_tokens"] = None
    envelope["snapshot"]["keys"][0]["sla_class"] = "platinum"
    store.cache_path.write_text(json.dumps(envelope))
    offline = EntitlementStore(
        "http://127.0.0.1:9", store.agent_id, store.agent_key, store.platform_key, store.cache_path
    )
    with pytest.raises(SnapshotError, match="does not verify"):
        offline.start()
    impostor = private_key_from_seed(os.urandom(32)).public_key()
    foreign = EntitlementStore(
        live_server.url, store.agent_id, store.agent_key, impostor, tmp_path / "other.json"
    )
    with pytest.raises(SnapshotError, match="does not verify"):
        foreign.refresh()


def test_a_refresh_picks_up_revocations(tiny_model: Path, tmp_path: Path, live_server: Any) -> None:
    contract = ContractFactory.create()
    issued = issue_api_key(contract_code=contract.code)
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract])
    store = harness.agent.entitlements
    assert store.lookup(issued.secret).status == "active"  # type: ignore[union-attr]
    revoke_api_key(issued.api_key.prefix)
    store.refresh()
    assert store.lookup(issued.secret).status == "revoked"  # type: ignore[union-attr]
