"""A real agent (torch engine, spool, shipper, entitlements) against a live platform, for the tests."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agents.services import register_agent, register_model_key
from compute_agents.runtime import Agent, AgentSettings, build_agent, pin_platform_key
from contracts.models import Contract
from tests.compute_agents.publisher import PUBLISHER_B64, model_id_of
from treemeter_records import private_key_from_seed, public_key_to_b64


@dataclass
class Harness:
    agent: Agent
    settings: AgentSettings
    seed: bytes


def start_agent(
    platform_url: str,
    model_dir: Path,
    data_dir: Path,
    contracts: list[Contract],
    *,
    agent_id: str = "gpu-test-1",
    seed: bytes | None = None,
    **overrides: object,
) -> Harness:
    seed = seed or os.urandom(32)
    register_agent(
        agent_id=agent_id,
        public_key_b64=public_key_to_b64(private_key_from_seed(seed)),
        tenant_codes=[],
        contract_codes=[c.code for c in contracts],
    )
    register_publisher(model_dir)
    pin_platform_key(platform_url, data_dir)
    settings = AgentSettings(
        agent_id=agent_id,
        platform_url=platform_url,
        key_file=data_dir / "agent.key",
        model_dir=model_dir,
        data_dir=data_dir,
        **overrides,  # type: ignore[arg-type]
    )
    agent = build_agent(settings, seed)
    agent.entitlements.refresh()
    return Harness(agent, settings, seed)


def register_publisher(model_dir: Path) -> None:
    """Register the tests' publisher key for the checkpoint's model, as platform staff would."""
    register_model_key(model_id=model_id_of(model_dir), public_key_b64=PUBLISHER_B64)
