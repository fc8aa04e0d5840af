"""`python -m compute_agents`: the agent's command line.

create-model (a tiny random-weight MoE checkpoint), identity, register (bind to the platform and pin
its key), serve (the OpenAI-compatible API with metering and shipping; behind an L1 router with
--router-url), router (the L1 router of a serving tree; with --jobs-broker its asynchronous path too),
jobs-worker (takes queued jobs and has the router run them), spool-status, ship (drain the spool now),
send-synthetic (synthetic records, for load tests against a deployment).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import (
    IngestClient,
    IngestError,
    build_batch,
    key_id_for,
    private_key_from_seed,
    public_key_to_b64,
)

from .scheduler.actuator import Actuator
from .synthetic import Workload, synthetic_records

DEFAULT_KEY_FILE = "/var/lib/treemeter-agent/agent.key"
DEFAULT_DATA_DIR = "/var/lib/treemeter-agent"
DEFAULT_MODEL_DIR = "/var/lib/treemeter-agent/model"
# The model publisher's Ed25519 seed (create-model, sign-manifest), not the agent's.
DEFAULT_PUBLISHER_KEY_FILE = "/var/lib/treemeter-agent/publisher.key"


def load_or_create_seed(path: Path) -> bytes:
    """The agent's 32-byte Ed25519 seed, created (mode 0600) on first use."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(32))
    seed = path.read_bytes()
    if len(seed) != 32:
        raise SystemExit(f"{path} does not hold a 32-byte Ed25519 seed ({len(seed)} bytes).")
    return seed


def identity(args: argparse.Namespace) -> int:
    key = private_key_from_seed(load_or_create_seed(Path(args.key_file)))
    print(f"key_id      {key_id_for(key)}")
    print(f"public_key  {public_key_to_b64(key)}")
    print("Register it: manage.py register_agent <agent-id> --public-key <public_key> --contract <code>")
    return 0


def send_synthetic(args: argparse.Namespace) -> int:
    if args.records < 1 or args.batch_size < 1:
        print("--records and --batch-size must be positive.", file=sys.stderr)
        return 2
    key = private_key_from_seed(load_or_create_seed(Path(args.key_file)))
    workload = Workload(
        agent_id=args.agent_id, tenant=args.tenant, contract=args.contract, package=args.package
    )
    end_ns = time.time_ns()
    records = list(
        synthetic_records(
            workload,
            first_seq=args.first_seq,
            count=args.records,
            start_ns=end_ns - 3_600 * 10**9,
            end_ns=end_ns,
        )
    )
    totals = [0, 0, 0]
    with IngestClient(args.platform_url) as client:
        for offset in range(0, len(records), args.batch_size):
            try:
                answer = client.send(
                    build_batch(records[offset : offset + args.batch_size], args.agent_id, key)
                )
            except IngestError as error:
                print(f"batch at seq {args.first_seq + offset} failed: {error}", file=sys.stderr)
                return 1
            totals = [totals[0] + answer.accepted, totals[1] + answer.duplicate, totals[2] + answer.rejected]
            print(f"sent {min(offset + args.batch_size, len(records))}/{len(records)}", flush=True)
    print(f"accepted {totals[0]}, duplicate {totals[1]}, rejected {totals[2]}")
    return 0 if totals[2] == 0 else 1


def create_model(args: argparse.Namespace) -> int:
    from .checkpoint import TinySizes, create_tiny_model
    from .manifest_signature import sign_manifest

    sizes = TinySizes(
        hidden=args.hidden, layers=args.layers, experts=args.experts, top_k=args.top_k, vocab=args.vocab
    )
    if min(sizes.hidden, sizes.layers, sizes.experts, sizes.top_k) < 1 or sizes.top_k > sizes.experts:
        print("sizes must be positive and --top-k at most --experts.", file=sys.stderr)
        return 2
    manifest = create_tiny_model(Path(args.directory), sizes, seed=args.seed)
    print(f"model_id      {manifest['model_id']}")
    print(f"weights_sha3  {manifest['weights_sha3']}")
    print(f"experts       {len(manifest['experts'])} files in {Path(args.directory) / 'experts'}")
    publisher = private_key_from_seed(load_or_create_seed(Path(args.publisher_key)))
    _print_signed(manifest["model_id"], sign_manifest(Path(args.directory), publisher), publisher)
    return 0


def sign_model(args: argparse.Namespace) -> int:
    """The model publisher's step: sign a checkpoint's manifest as it is written."""
    from .checkpoint import CheckpointError, read_manifest
    from .manifest_signature import sign_manifest

    try:
        model_id = str(read_manifest(Path(args.directory))["model_id"])
    except (CheckpointError, ValueError, KeyError) as error:
        print(f"cannot sign: {error}", file=sys.stderr)
        return 2
    publisher = private_key_from_seed(load_or_create_seed(Path(args.publisher_key)))
    _print_signed(model_id, sign_manifest(Path(args.directory), publisher), publisher)
    return 0


def _print_signed(model_id: str, key_id: str, publisher: Ed25519PrivateKey) -> None:
    print(f"signed by     {key_id}")
    print(
        f"Platform staff register the key: manage.py register_model_key {model_id} "
        f"--public-key {public_key_to_b64(publisher)}"
    )


def register(args: argparse.Namespace) -> int:
    from .runtime import pin_platform_key

    key = private_key_from_seed(load_or_create_seed(Path(args.key_file)))
    try:
        platform_key = pin_platform_key(args.platform_url, Path(args.data_dir))
    except (httpx.HTTPError, OSError, ValueError, KeyError) as error:
        print(f"cannot fetch the platform key from {args.platform_url}: {error}", file=sys.stderr)
        return 1
    print(f"pinned platform key {platform_key} in {args.data_dir}")
    print(f"agent public key    {public_key_to_b64(key)}  ({key_id_for(key)})")
    print(
        f"Platform staff bind it: manage.py register_agent {args.agent_id} "
        f"--public-key {public_key_to_b64(key)} --contract <code>"
    )
    return 0


def _settings(args: argparse.Namespace) -> Any:
    from .runtime import AgentSettings

    return AgentSettings(
        agent_id=args.agent_id,
        platform_url=args.platform_url,
        key_file=Path(args.key_file),
        model_dir=Path(args.model_dir),
        data_dir=Path(args.data_dir),
        rules_file=Path(args.rules) if args.rules else None,
        cache_capacity=args.cache_capacity,
        preheat=args.preheat,
        batch_size=args.batch_size,
        batch_age_s=args.batch_age,
        spool_max_records=args.spool_max_records,
        threads=args.threads,
        workers=args.workers,
        engine=args.engine,
        quota_leases=args.quota_leases,
        lease_block_tokens=args.lease_block_tokens,
        lease_low_water=args.lease_low_water,
        vllm_capture=args.vllm_capture,
        router_url=args.router_url,
        router_key=args.router_key,
        subtree=args.subtree,
        advertise_url=args.advertise_url or (f"http://{args.host}:{args.port}" if args.router_url else None),
        onnx_config=Path(args.onnx_config) if args.onnx_config else None,
    )


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app
    from .entitlements import SnapshotError
    from .logs import configure_logging
    from .manifest_signature import ManifestRefused
    from .onnx_executor import CapabilityConfigError
    from .runtime import build_agent, report_manifest_refusal

    configure_logging()
    _stop_cleanly_on_sigterm()
    settings, seed = _settings(args), load_or_create_seed(Path(args.key_file))
    try:
        agent = build_agent(settings, seed)
        agent.start()
    except SnapshotError as error:
        print(f"no entitlements: {error}", file=sys.stderr)
        return 1
    except CapabilityConfigError as error:
        print(f"onnx config refused: {error}", file=sys.stderr)
        return 1
    except ManifestRefused as refused:
        print(f"manifest refused ({refused.reason}): {refused}", file=sys.stderr)
        unreported = report_manifest_refusal(settings, private_key_from_seed(seed), refused)
        if unreported:
            print(f"the refusal could not be reported: {unreported}", file=sys.stderr)
        return 3
    server = uvicorn.Server(
        uvicorn.Config(create_app(agent.service), host=args.host, port=args.port, log_level="warning")
    )
    failed: list[BaseException] = []

    def announce() -> None:
        """Once the API listens: the warm-up check, then the heartbeats (a failed check stops it)."""
        while not server.started and not server.should_exit:
            time.sleep(0.01)
        try:
            agent.announce()
        except Exception as error:  # the engine's own errors: this replica must not serve
            failed.append(error)
            server.should_exit = True

    threading.Thread(target=announce, name="announce", daemon=True).start()
    try:
        server.run()
    finally:
        agent.stop()
    if failed:
        print(f"the warm-up check failed: {failed[0]!r}", file=sys.stderr)
        return 1
    return 0


def _stop_cleanly_on_sigterm() -> None:
    """uvicorn shuts down on SIGTERM, then raises it again; with the default handler that ends the process
    before the caller's ``finally`` (the spool closed, the replicas a router started stopped). As
    ``SystemExit`` (status 143) it runs them."""

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _pairs(pairs: list[str], flag: str, shape: str) -> dict[str, str]:
    """``NAME=VALUE`` options, each given once per name."""
    found = {}
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator or not name or not value:
            raise SystemExit(f"{flag} takes {shape}, not {pair!r}.")
        found[name] = value
    return found


def router(args: argparse.Namespace) -> int:
    import uvicorn

    from .entitlements import SnapshotError
    from .logs import configure_logging
    from .scheduler.config import TreeConfigError
    from .tree.app import create_router_app
    from .tree.forward import ExecutorClient
    from .tree.runtime import QueueNotConfigured, RouterSettings, ScalingNotConfigured, build_router
    from .tree.supervisor import ReplicaSlotsError

    configure_logging()
    _stop_cleanly_on_sigterm()
    settings = RouterSettings(
        agent_id=args.agent_id,
        platform_url=args.platform_url,
        data_dir=Path(args.data_dir),
        executor_keys=_pairs(args.executor, "--executor", "AGENT_ID=PUBLIC_KEY"),
        rules_file=Path(args.rules) if args.rules else None,
        tree_config=Path(args.tree_config) if args.tree_config else None,
        jobs_broker=args.jobs_broker,
        jobs_queue=args.jobs_queue,
        private_callbacks=args.allow_private_callbacks,
        public_url=args.public_url or f"http://{args.host}:{args.port}",
    )
    try:
        actuator = _actuator(args, settings.data_dir)
        router = build_router(settings, load_or_create_seed(Path(args.key_file)), actuator)
    except (QueueNotConfigured, TreeConfigError, ScalingNotConfigured, ReplicaSlotsError) as error:
        print(f"router: {error}", file=sys.stderr)
        return 2
    try:
        router.start()
    except SnapshotError as error:
        print(f"no entitlements: {error}", file=sys.stderr)
        return 1
    client = ExecutorClient(args.executor_timeout)
    try:
        app = create_router_app(router.service, client, router.jobs_api(client))
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        router.stop()
    return 0


def _actuator(args: argparse.Namespace, data_dir: Path) -> Actuator | None:
    """What the autoscaler scales: executor processes here (``--replica-slots``) or the Deployments of a
    Kubernetes namespace (``--kube-namespace`` and ``--kube-deployment``); none: no autoscaling."""
    from .tree.runtime import ScalingNotConfigured

    if args.replica_slots and args.kube_namespace:
        raise ScalingNotConfigured("give --replica-slots or --kube-namespace, not both")
    if args.replica_slots:
        from .scheduler.config import TreeConfig
        from .tree.supervisor import LocalSupervisor, load_slots

        if not args.tree_config:
            raise ScalingNotConfigured("--replica-slots needs --tree-config")
        subtrees = TreeConfig.load(Path(args.tree_config)).subtrees
        slots = load_slots(Path(args.replica_slots))
        for name in slots:
            if name in subtrees and subtrees[name].min_replicas < len(subtrees[name].executors):
                raise ScalingNotConfigured(
                    f"subtree {name!r} lists {len(subtrees[name].executors)} executors, which the "
                    f"supervisor never stops: its replicas.min must be at least that"
                )
        fixed = {name: len(subtrees[name].executors) for name in slots if name in subtrees}
        return LocalSupervisor(slots, data_dir / "replicas", fixed)
    if args.kube_namespace:
        from kubernetes.config import ConfigException

        from .scheduler.kubernetes import KubernetesActuator

        deployments = _pairs(args.kube_deployment, "--kube-deployment", "SUBTREE=DEPLOYMENT")
        if not deployments:
            raise ScalingNotConfigured("--kube-namespace needs --kube-deployment SUBTREE=DEPLOYMENT")
        try:
            return KubernetesActuator.from_config(args.kube_namespace, deployments)
        except ConfigException as error:
            raise ScalingNotConfigured(f"no Kubernetes credentials: {error}") from None
    if args.kube_deployment:
        raise ScalingNotConfigured("--kube-deployment needs --kube-namespace")
    return None


def jobs_worker(args: argparse.Namespace) -> int:
    """A Celery worker of the job queue (threads: each job waits on the router's answer)."""
    from .jobs.queue import job_queue
    from .logs import configure_logging

    configure_logging()
    app = job_queue(
        args.broker, args.queue, args.visibility_timeout, private_callbacks=args.allow_private_callbacks
    )
    app.worker_main(
        [
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            str(args.concurrency),
            "--queues",
            args.queue,
            "--loglevel",
            "INFO",
        ]
    )
    return 0


def spool_status(args: argparse.Namespace) -> int:
    from .spool import Spool

    path = Path(args.data_dir) / "spool.sqlite3"
    if not path.exists():
        print(f"no spool at {path}", file=sys.stderr)
        return 1
    status = Spool(path).status()
    lag = 0.0 if status.oldest_spooled_ns is None else (time.time_ns() - status.oldest_spooled_ns) / 1e9
    print(f"depth     {status.depth} records ({status.bytes} bytes)")
    print(f"next_seq  {status.next_seq}")
    print(f"shipped   {status.shipped}")
    print(f"lag       {lag:.1f} s")
    return 0


def ship(args: argparse.Namespace) -> int:
    from .shipper import Shipper
    from .spool import Spool

    key = private_key_from_seed(load_or_create_seed(Path(args.key_file)))
    spool = Spool(Path(args.data_dir) / "spool.sqlite3")
    with IngestClient(args.platform_url) as client:
        shipper = Shipper(spool, client, args.agent_id, key, batch_size=args.batch_size)
        try:
            shipped = shipper.drain()
        except IngestError as error:
            print(f"shipping stopped: {error}; the records stay in the spool.", file=sys.stderr)
            return 1
    print(f"shipped {shipped} records")
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="python -m compute_agents",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument("--key-file", default=os.environ.get("TREEMETER_AGENT_KEY_FILE", DEFAULT_KEY_FILE))
    commands = root.add_subparsers(dest="command")
    commands.add_parser("identity", help="create the key if needed; print key id and public key (default)")
    platform_url = os.environ.get("TREEMETER_PLATFORM_URL", "http://127.0.0.1:8000")
    agent_id = os.environ.get("TREEMETER_AGENT_ID")
    data_dir = os.environ.get("TREEMETER_AGENT_DATA_DIR", DEFAULT_DATA_DIR)
    model_dir = os.environ.get("TREEMETER_MODEL_DIR", DEFAULT_MODEL_DIR)

    create = commands.add_parser("create-model", help="create a tiny random-weight Qwen3-MoE checkpoint")
    create.add_argument("directory", nargs="?", default=model_dir)
    create.add_argument("--hidden", type=int, default=128)
    create.add_argument("--layers", type=int, default=4)
    create.add_argument("--experts", type=int, default=16)
    create.add_argument("--top-k", type=int, default=2)
    create.add_argument("--vocab", type=int, default=1024)
    create.add_argument("--seed", type=int, default=0)
    publisher_key = os.environ.get("TREEMETER_PUBLISHER_KEY_FILE", DEFAULT_PUBLISHER_KEY_FILE)
    create.add_argument(
        "--publisher-key", default=publisher_key, help="the publisher's Ed25519 seed; created if missing"
    )
    sign = commands.add_parser("sign-manifest", help="sign a checkpoint's manifest with the publisher key")
    sign.add_argument("directory", nargs="?", default=model_dir)
    sign.add_argument("--publisher-key", default=publisher_key)

    reg = commands.add_parser("register", help="pin the platform's key and print how to bind this agent")
    reg.add_argument("--platform-url", default=platform_url)
    reg.add_argument("--agent-id", default=agent_id, required=agent_id is None)
    reg.add_argument("--data-dir", default=data_dir)

    run = commands.add_parser("serve", help="serve the OpenAI-compatible API, meter, spool and ship")
    run.add_argument("--platform-url", default=platform_url)
    run.add_argument("--agent-id", default=agent_id, required=agent_id is None)
    run.add_argument("--data-dir", default=data_dir)
    run.add_argument("--model-dir", default=model_dir)
    run.add_argument("--rules", help="the L1 rules file (JSON); default: the built-in rules")
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, default=8100)
    run.add_argument("--cache-capacity", type=int, help="experts resident per layer (default: all)")
    run.add_argument("--preheat", type=int, help="experts preheated per layer (default: half the capacity)")
    run.add_argument("--batch-size", type=int, default=500)
    run.add_argument("--batch-age", type=float, default=1.0, help="seconds before a partial batch ships")
    run.add_argument("--spool-max-records", type=int, default=100_000)
    run.add_argument("--threads", type=int, help="torch threads")
    run.add_argument("--workers", type=int, default=4, help="torch engine: requests served at once")
    run.add_argument("--engine", choices=["torch", "vllm"], default="torch", help="vllm: the optional extra")
    run.add_argument(
        "--quota-leases",
        action="store_true",
        help="take each key's quota in leases from the platform: required when several agents serve a key",
    )
    run.add_argument("--lease-block-tokens", type=int, default=4096, help="tokens asked for per lease")
    run.add_argument(
        "--lease-low-water",
        type=float,
        default=0.25,
        help="ask for the next lease ahead when less than this fraction of a block is left (0: off)",
    )
    run.add_argument(
        "--vllm-capture",
        choices=["auto", "native", "hook"],
        default="auto",
        help="vLLM routing capture: native (GPU, vLLM >= 0.14), hook (CPU); auto picks native where it can",
    )

    run.add_argument(
        "--router-url", help="serve behind this L1 router: only what it decided, heartbeats to it"
    )
    run.add_argument("--router-key", help="the router's public key (base64), pinned")
    run.add_argument("--subtree", default="default", help="the router's subtree this executor serves")
    run.add_argument(
        "--advertise-url", help="where the router reaches this executor (default: --host/--port)"
    )
    run.add_argument(
        "--onnx-config",
        default=os.environ.get("TREEMETER_ONNX_CONFIG"),
        help="the ONNX capabilities to serve: the executor config (JSON) the package factory wrote",
    )

    tree = commands.add_parser("router", help="the L1 router: decide, choose an executor, relay, fail over")
    tree.add_argument("--platform-url", default=platform_url)
    tree.add_argument("--agent-id", default=agent_id, required=agent_id is None)
    tree.add_argument("--data-dir", default=data_dir)
    tree.add_argument("--rules", help="the L1 rules file (JSON) or bundle; default: the built-in rules")
    tree.add_argument(
        "--tree-config",
        help="tree-config.yaml: the subtrees' concurrency, waiting lines and priorities (docs/scheduler.md)",
    )
    tree.add_argument(
        "--replica-slots",
        help="JSON: per subtree, the executor processes the autoscaler may start here (docs/scheduler.md)",
    )
    tree.add_argument("--kube-namespace", help="autoscale the subtrees' Deployments in this namespace")
    tree.add_argument(
        "--kube-deployment",
        action="append",
        default=[],
        metavar="SUBTREE=DEPLOYMENT",
        help="a subtree's Deployment",
    )
    tree.add_argument("--host", default="127.0.0.1")
    tree.add_argument("--port", type=int, default=8000)
    tree.add_argument(
        "--executor", action="append", default=[], metavar="AGENT_ID=PUBLIC_KEY", help="an executor it trusts"
    )
    tree.add_argument("--executor-timeout", type=float, default=120.0, help="seconds to wait for an answer")
    tree.add_argument(
        "--jobs-broker",
        help="the job queue's broker (amqp://…, redis://…, filesystem://): the asynchronous path",
    )
    tree.add_argument("--jobs-queue", default="treemeter-jobs", help="the queue's name on the broker")
    tree.add_argument(
        "--allow-private-callbacks", action="store_true", help="job callbacks may reach private addresses"
    )
    tree.add_argument("--public-url", help="where job workers reach this router (default: --host/--port)")

    worker = commands.add_parser(
        "jobs-worker", help="a job worker: take queued jobs, have the router run them"
    )
    worker.add_argument("--broker", required=True, help="the job queue's broker (the router's --jobs-broker)")
    worker.add_argument(
        "--queue", default="treemeter-jobs", help="the queue's name (the router's --jobs-queue)"
    )
    worker.add_argument("--concurrency", type=int, default=4, help="jobs in flight at once")
    worker.add_argument(
        "--allow-private-callbacks", action="store_true", help="job callbacks may reach private addresses"
    )
    worker.add_argument(
        "--visibility-timeout",
        type=float,
        default=900.0,
        help="Redis broker: seconds before a job a dead worker held is given to another",
    )

    status = commands.add_parser("spool-status", help="records waiting, next seq, shipped, lag")
    status.add_argument("--data-dir", default=data_dir)

    drain = commands.add_parser("ship", help="ship every spooled record now")
    drain.add_argument("--platform-url", default=platform_url)
    drain.add_argument("--agent-id", default=agent_id, required=agent_id is None)
    drain.add_argument("--data-dir", default=data_dir)
    drain.add_argument("--batch-size", type=int, default=500)

    send = commands.add_parser("send-synthetic", help="sign and send synthetic MoE records")
    send.add_argument("--platform-url", default=platform_url)
    send.add_argument("--agent-id", required=True)
    send.add_argument("--tenant", required=True)
    send.add_argument("--contract", required=True)
    send.add_argument("--package", required=True)
    send.add_argument("--records", type=int, default=1_000)
    send.add_argument("--batch-size", type=int, default=1_000)
    send.add_argument("--first-seq", type=int, default=0)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    commands = {
        "send-synthetic": send_synthetic,
        "create-model": create_model,
        "sign-manifest": sign_model,
        "register": register,
        "serve": serve,
        "router": router,
        "jobs-worker": jobs_worker,
        "spool-status": spool_status,
        "ship": ship,
    }
    return commands.get(args.command, identity)(args)
