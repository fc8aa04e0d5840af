"""Assemble a running L1 router from its settings: its own identity (a registered agent, so it holds
the entitlement snapshot of the keys it routes and ships the records of requests nobody served), its
rules and classifier, the executors it trusts (their public keys, pinned), its spool and shipper, and
with a broker its job table and the publisher that feeds the queue."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import structlog

from treemeter_records import private_key_from_seed, public_key_from_b64

from ..entitlements import EntitlementStore
from ..jobs.queue import QUEUE, Publisher, job_queue, job_token
from ..jobs.store import JobStore
from ..router import Rules
from ..runtime import open_entitlements, open_shipper
from ..scheduler.actuator import Actuator
from ..scheduler.config import TreeConfig
from ..shipper import Shipper
from ..spool import Spool
from .events import EventOutbox, EventShipper
from .forward import ExecutorClient
from .inflight import InFlightLedger
from .jobs import JobRunner
from .jobs_api import JobsApi
from .registry import Registry
from .scheduling import TreeScheduling
from .service import RouterService
from .supervisor import LocalSupervisor

log = structlog.get_logger("compute_agents.tree")


@dataclass(frozen=True)
class RouterSettings:
    agent_id: str
    platform_url: str
    data_dir: Path
    executor_keys: dict[str, str] = field(default_factory=dict)  # executor agent id → public key (base64)
    rules_file: Path | None = None
    tree_config: Path | None = None  # tree-config.yaml: subtrees, their concurrency, lines, priorities
    stale_after_s: float = 3.0
    cooldown_s: float = 2.0
    batch_size: int = 500
    batch_age_s: float = 1.0
    spool_max_records: int = 100_000
    jobs_broker: str | None = None  # the asynchronous path's broker (Celery URL); None: no queue
    jobs_queue: str = QUEUE
    public_url: str = "http://127.0.0.1:8000"  # where job workers reach this router
    private_callbacks: bool = False  # job callbacks may reach addresses inside the network


@dataclass
class TreeRouter:
    service: RouterService
    shipper: Shipper
    entitlements: EntitlementStore
    jobs: JobQueue | None = None
    events: EventShipper | None = None  # with a tree config: the scheduler's events to the platform
    actuator: Actuator | None = None  # with a tree config: what the autoscaler's steps scale

    def start(self) -> None:
        lost = self.service.recover_lost()
        if lost:
            log.warning("requests_lost_by_an_earlier_process", superseded=lost)
        self.entitlements.start()
        self.shipper.start()
        if self.jobs is not None:
            self.jobs.publisher.start()
        if self.service.scheduling is not None and self.events is not None:
            self.service.scheduling.start()
            self.events.start()

    def stop(self) -> None:
        if self.jobs is not None:
            self.jobs.publisher.stop()
            self.jobs.store.close()
        if self.service.scheduling is not None and self.events is not None:
            self.service.scheduling.stop()
            self.events.stop()
            self.events.outbox.close()
        if isinstance(self.actuator, LocalSupervisor):
            self.actuator.stop_all()  # the replicas it started go with it
        self.entitlements.stop()
        self.shipper.stop()
        self.service.inflight.close()

    def jobs_api(self, client: ExecutorClient) -> JobsApi | None:
        if self.jobs is None:
            return None
        return JobsApi(
            JobRunner(self.service, self.jobs.store, client),
            self.jobs.store,
            self.jobs.publisher,
            self.jobs.private_callbacks,
        )


@dataclass(frozen=True)
class JobQueue:
    store: JobStore
    publisher: Publisher
    private_callbacks: bool


class QueueNotConfigured(ValueError):
    """The rules queue a request class but the router was given no broker."""


class ScalingNotConfigured(ValueError):
    """An actuator was given without a tree config, or for a subtree the config does not have."""


def build_router(settings: RouterSettings, seed: bytes, actuator: Actuator | None = None) -> TreeRouter:
    """The router; with ``actuator`` (and a tree config naming its subtrees) the autoscaler runs too."""
    tree = TreeConfig.load(settings.tree_config) if settings.tree_config else None  # refused before all else
    if actuator is not None:
        unknown = [name for name in actuator.subtrees() if tree is None or name not in tree.subtrees]
        if tree is None or unknown:
            raise ScalingNotConfigured(
                "autoscaling needs --tree-config"
                if tree is None
                else f"the tree config has no subtree {unknown[0]!r} to scale"
            )
    key = private_key_from_seed(seed)
    entitlements = open_entitlements(settings.platform_url, settings.agent_id, key, settings.data_dir)
    spool = Spool(settings.data_dir / "spool.sqlite3", max_records=settings.spool_max_records)
    service = RouterService(
        settings.agent_id,
        key,
        Rules.load(settings.rules_file),
        entitlements,
        spool,
        Registry(stale_after_s=settings.stale_after_s, cooldown_s=settings.cooldown_s),
        {name: public_key_from_b64(b64) for name, b64 in settings.executor_keys.items()},
        InFlightLedger(settings.data_dir / "inflight.sqlite3"),
        tree,
    )
    shipper = open_shipper(
        spool, settings.platform_url, settings.agent_id, key, settings.batch_size, settings.batch_age_s
    )
    events = None
    if tree is not None and service.lines is not None:
        outbox = EventOutbox(settings.data_dir / "events.sqlite3")
        service.scheduling = TreeScheduling(tree, service.registry, service.lines, outbox, actuator=actuator)
        events = EventShipper(outbox, settings.platform_url, settings.agent_id, key)
    jobs = None
    if settings.jobs_broker:
        store = JobStore(settings.data_dir / "jobs.sqlite3", key)
        publisher = Publisher(
            job_queue(settings.jobs_broker, settings.jobs_queue),
            store,
            settings.public_url,
            lambda job_id: job_token(key, job_id),
        )
        jobs = JobQueue(store, publisher, settings.private_callbacks)
    elif any(row.queued for row in service.rules.policy):
        raise QueueNotConfigured(
            "the rules queue a request class (a policy row 'queued'): give --jobs-broker"
        )
    return TreeRouter(service, shipper, entitlements, jobs, events, actuator)
