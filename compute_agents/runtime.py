"""Assemble a running agent from its settings: engine, spool, shipper, entitlements, rules, metrics."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import IngestClient, private_key_from_seed, protocol, public_key_from_b64

from .checkpoint import MANIFEST, sha3_file
from .engine import Engine, SamplingParams, TorchEngine
from .entitlements import EntitlementStore
from .leases import LeaseClient, LeasedQuotaBook
from .manifest_signature import ManifestRefused
from .metrics import AgentMetrics
from .onnx_executor import OnnxExecutor
from .router import DEFAULT_SUBTREE, Rules
from .service import AgentIdentity, AgentService
from .shipper import Shipper
from .spool import Spool
from .tree.decision import DecisionReader
from .tree.heartbeat import ExecutorCard, HeartbeatSender

PLATFORM_KEY_FILE = "platform-key.b64"
WARM_UP_PROMPT = "warm-up"  # the check a replica passes before it heartbeats (Agent.announce)


@dataclass(frozen=True)
class AgentSettings:
    agent_id: str
    platform_url: str
    key_file: Path
    model_dir: Path
    data_dir: Path
    rules_file: Path | None = None
    cache_capacity: int | None = None
    preheat: int | None = None
    batch_size: int = 500
    batch_age_s: float = 1.0
    spool_max_records: int = 100_000
    threads: int | None = None
    workers: int = 4  # torch engine: requests served at once on the one model
    engine: str = "torch"  # or "vllm" (the optional extra)
    vllm_capture: str = "auto"  # vLLM routing capture: "native" (GPU, vLLM >= 0.14), "hook" or "auto"
    # Quota leases from the platform: required when several agents serve one key. Off, the agent
    # checks each key's whole quota against its own spool (one agent per key only).
    quota_leases: bool = False
    lease_block_tokens: int = 4096
    lease_low_water: float = 0.25  # the next block is asked for ahead below this fraction of one left
    # Behind an L1 router (an executor of its tree): serve only what it decided, heartbeat to it.
    router_url: str | None = None
    router_key: str | None = None  # the router's public key (base64), pinned
    subtree: str = DEFAULT_SUBTREE
    advertise_url: str | None = None  # where the router reaches this executor
    heartbeat_s: float = 0.5
    onnx_config: Path | None = None  # ONNX capabilities served beside the engine (a stand-alone agent)


@dataclass
class Agent:
    service: AgentService
    shipper: Shipper
    entitlements: EntitlementStore
    leases: LeasedQuotaBook | None = None
    heartbeat: HeartbeatSender | None = None

    def start(self) -> None:
        """Entitlements, shipping and leases; the heartbeat waits for ``announce``."""
        self.entitlements.start()
        self.shipper.start()
        if self.leases is not None:
            self.leases.start()

    def announce(self) -> None:
        """Behind a router, once the API listens: the warm-up check (one greedy token through the engine,
        outside any request, so no record), then the heartbeats. A replica the router hears of can
        answer; one that fails its check raises here and is never heard of."""
        if self.heartbeat is None:
            return
        self.service.engine.generate(WARM_UP_PROMPT, SamplingParams(1, temperature=0.0))
        self.heartbeat.start()

    def stop(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.service.capabilities is not None:
            self.service.capabilities.executor.close()
        self.entitlements.stop()
        if self.leases is not None:
            self.leases.close()
        self.shipper.stop()


def pin_platform_key(platform_url: str, data_dir: Path) -> str:
    """Fetch the platform's public key once (at registration) and keep it; returns it (base64)."""
    answer = httpx.get(platform_url.rstrip("/") + protocol.PLATFORM_KEY_PATH, timeout=10).json()
    public_key = str(answer["public_key"])
    public_key_from_b64(public_key)
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / PLATFORM_KEY_FILE).write_text(public_key + "\n")
    return public_key


def report_manifest_refusal(
    settings: AgentSettings, key: Ed25519PrivateKey, refused: ManifestRefused
) -> str | None:
    """Tell the platform that this agent refused its checkpoint's manifest (stored, counted, shown to
    staff); returns why it could not be told, else None. The agent exits either way."""
    body = json.dumps(
        {
            "model_id": refused.model_id,
            "reason": refused.reason,
            "key_id": refused.key_id,
            "manifest_sha3": sha3_file(settings.model_dir / MANIFEST),
            "refused_ns": time.time_ns(),
        }
    ).encode()
    path = protocol.MANIFEST_REFUSALS_PATH
    headers = protocol.signed_headers(key, settings.agent_id, "POST", path, body)
    try:
        answer = httpx.post(
            settings.platform_url.rstrip("/") + path,
            content=body,
            headers={**headers, "Content-Type": "application/json"},
            timeout=10,
        )
    except httpx.HTTPError as error:
        return f"platform unreachable: {error}"
    return (
        None
        if answer.status_code in (200, 201)
        else f"platform answered {answer.status_code}: {answer.text[:200]}"
    )


def open_entitlements(
    platform_url: str, agent_id: str, key: Ed25519PrivateKey, data_dir: Path
) -> EntitlementStore:
    """The signed entitlement snapshot of this agent (an executor or a router), checked against the
    platform key pinned at registration."""
    pinned = data_dir / PLATFORM_KEY_FILE
    if not pinned.exists():
        raise SystemExit(
            f"No pinned platform key at {pinned}: run `python -m compute_agents register` first."
        )
    platform_key = public_key_from_b64(pinned.read_text().strip())
    return EntitlementStore(platform_url, agent_id, key, platform_key, data_dir / "entitlements.json")


def open_shipper(
    spool: Spool,
    platform_url: str,
    agent_id: str,
    key: Ed25519PrivateKey,
    batch_size: int,
    batch_age_s: float,
) -> Shipper:
    client = IngestClient(platform_url, max_attempts=3, backoff_max=2.0)
    return Shipper(spool, client, agent_id, key, batch_size=batch_size, max_age_s=batch_age_s)


def build_agent(settings: AgentSettings, seed: bytes) -> Agent:
    """The agent; an ONNX config it cannot serve (``CapabilityConfigError``) is refused first."""
    if settings.onnx_config is not None and settings.router_url:
        raise SystemExit(
            "--onnx-config is for a stand-alone agent: an L1 router does not route capabilities."
        )
    onnx = (
        OnnxExecutor.from_config(settings.onnx_config, settings.workers)
        if settings.onnx_config is not None
        else None
    )
    key = private_key_from_seed(seed)
    entitlements = open_entitlements(settings.platform_url, settings.agent_id, key, settings.data_dir)
    entitlements.load()  # before the checkpoint: its manifest's signature is checked with the snapshot's keys
    trust = entitlements.manifest_trust()
    spool = Spool(settings.data_dir / "spool.sqlite3", max_records=settings.spool_max_records)
    metrics = AgentMetrics(spool.status, entitlements.age_s)
    engine: Engine
    if settings.engine == "vllm":
        from .vllm_engine import VllmEngine

        engine = VllmEngine(
            settings.model_dir,
            trust=trust,
            capture=settings.vllm_capture,
            on_invalid_capture=metrics.routed_experts_invalid.inc,
        )
    else:
        engine = TorchEngine(
            settings.model_dir,
            trust=trust,
            cache_capacity=settings.cache_capacity,
            preheat=settings.preheat,
            threads=settings.threads,
            workers=settings.workers,
        )
    leases = (
        LeasedQuotaBook(
            spool,
            LeaseClient(settings.platform_url, settings.agent_id, key),
            block_tokens=settings.lease_block_tokens,
            low_water=settings.lease_low_water,
        )
        if settings.quota_leases
        else None
    )
    if bool(settings.router_url) != bool(settings.router_key) or (
        settings.router_url and not settings.advertise_url
    ):
        raise SystemExit("An executor behind a router needs --router-url, --router-key and --advertise-url.")
    decisions = (
        DecisionReader(public_key_from_b64(settings.router_key), settings.agent_id)
        if settings.router_key
        else None
    )
    service = AgentService(
        AgentIdentity(
            settings.agent_id, node=f"{settings.agent_id}.l3", cache_node=f"{settings.agent_id}.l2", key=key
        ),
        engine,
        spool,
        entitlements,
        Rules.load(settings.rules_file),
        metrics,
        leases,
        decisions,
        onnx,
    )
    shipper = open_shipper(
        spool, settings.platform_url, settings.agent_id, key, settings.batch_size, settings.batch_age_s
    )
    heartbeat = None
    if settings.router_url and settings.advertise_url:
        card = ExecutorCard(
            settings.agent_id,
            settings.advertise_url,
            settings.subtree,
            engine.model_id,
            engine.weights_sha3,
            engine.served_names,
            settings.workers,
        )
        heartbeat = HeartbeatSender(
            settings.router_url,
            card,
            key,
            lambda: service.outstanding,
            engine.resident_experts,
            interval_s=settings.heartbeat_s,
        )
    return Agent(service, shipper, entitlements, leases, heartbeat)
