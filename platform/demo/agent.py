"""A real compute agent inside the demo process: torch engine on a tiny local MoE checkpoint, its
OpenAI-compatible API served by uvicorn from a thread, its shipper posting to the demo's ingest API."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from compute_agents.app import create_app
from compute_agents.checkpoint import MANIFEST, create_tiny_model
from compute_agents.runtime import Agent, AgentSettings, build_agent, pin_platform_key


@dataclass
class RunningAgent:
    agent: Agent
    server: uvicorn.Server
    url: str

    def stop(self) -> None:
        self.server.should_exit = True
        self.agent.stop()


def start_agent(data_dir: Path, agent_id: str, seed: bytes, platform_url: str, host: str) -> RunningAgent:
    """Create the tiny model once (kept in the data dir), start the agent and serve its API on a free port."""
    model_dir = data_dir / "agent" / "model"
    if not (model_dir / MANIFEST).exists():
        create_tiny_model(model_dir)
    pin_platform_key(platform_url, data_dir / "agent")
    settings = AgentSettings(
        agent_id=agent_id,
        platform_url=platform_url,
        key_file=data_dir / "demo-agent-key",
        model_dir=model_dir,
        data_dir=data_dir / "agent",
        cache_capacity=8,
        batch_size=50,
        batch_age_s=0.5,
        quota_leases=True,  # keys with a token quota take it in leases from the platform (docs/agent.md)
    )
    agent = build_agent(settings, seed)
    agent.start()
    server = uvicorn.Server(uvicorn.Config(create_app(agent.service), host=host, port=0, log_level="warning"))
    threading.Thread(target=server.run, name="agent-api", daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the agent's API did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    return RunningAgent(agent, server, f"http://{host}:{port}")
