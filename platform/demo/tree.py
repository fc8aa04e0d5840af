"""The serving tree of the demo, as real processes: one L1 router (`python -m compute_agents router`,
with the semantic classifier trained once into the data dir) in front of executors (`serve
--router-url`) on a tiny local MoE checkpoint, in two subtrees (``TREE_CONFIG``): ``default`` (two
executors) and ``batch`` (the batch SLA class's requests: one executor, and a replica slot the router's
supervisor starts when the autoscaler steps up). Each is a registered agent with its own key, spool and
shipper, posting to the demo's ingest API; the router is registered as kind ``router``."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from agents.services import register_model_key
from compute_agents.checkpoint import MANIFEST, create_tiny_model, read_manifest
from compute_agents.classifier.train import train_bundle
from compute_agents.default_rules import DEFAULT_RULES
from compute_agents.manifest_signature import SIGNATURE_FILE, sign_manifest
from compute_agents.runtime import pin_platform_key
from treemeter_records import private_key_from_seed, public_key_to_b64

from .services import EXECUTOR_IDS, ROUTER_ID, DemoSetup, read_or_create_seed

START_TIMEOUT_S = 120
DEFAULT, BATCH = EXECUTOR_IDS[:2], EXECUTOR_IDS[2:3]  # started with the tree
REPLICA = EXECUTOR_IDS[3]  # batch's replica slot: started by the router when the autoscaler steps up
# The design's parameters, on a clock ten times faster (a 1 s period, loans returned after 10 s held), so
# that `make run`'s burst shows a borrow, a scale-up, the return and the scale-down within a minute.
TREE_CONFIG = f"""\
version: 1
scheduler:
  period_s: 1
  window_s: 6
  return_after_s: 10
subtrees:
  default:
    kind: inference
    executors: [{", ".join(DEFAULT)}]
    sla: {{p99_ms: 300, max_concurrency: 8}}
    replicas: {{min: 2, max: 2}}
  batch:
    kind: batch
    executors: [{", ".join(BATCH)}]
    sla: {{p99_ms: 2000, max_concurrency: 4}}
    replicas: {{min: 1, max: 2}}
"""


@dataclass
class RunningTree:
    url: str  # the router's: where customers send requests
    processes: dict[str, subprocess.Popen[bytes]]
    data_dirs: dict[str, Path]
    platform_url: str
    log_dir: Path
    model: tuple[str, str]  # the executors' model id and weights fingerprint

    def get(self, path: str) -> Any:
        return httpx.get(self.url + path, timeout=10).json()

    def stop(self) -> None:
        """Stop every process (each closes its spool), then ship what their spools still hold."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for name, data_dir in self.data_dirs.items():
            command = [
                "ship",
                "--platform-url",
                self.platform_url,
                "--agent-id",
                name,
                "--data-dir",
                str(data_dir),
            ]
            subprocess.run(agent_command(data_dir, *command), check=True, capture_output=True, timeout=120)


def model_dir(data_dir: Path) -> Path:
    """The tiny checkpoint, created once and kept in the data dir, published (``publish_model``)."""
    directory = data_dir / "agent" / "model"
    if not (directory / MANIFEST).exists():
        create_tiny_model(directory)
    publish_model(directory, data_dir)
    return directory


def publish_model(directory: Path, data_dir: Path) -> None:
    """Sign the checkpoint's manifest (once) as the demo's model publisher, and register the publisher's key
    for its model, as platform staff would: the executors refuse an unsigned manifest."""
    publisher = private_key_from_seed(read_or_create_seed(data_dir / "publisher-key"))
    if not (directory / SIGNATURE_FILE).exists():
        sign_manifest(directory, publisher)
    register_model_key(
        model_id=str(read_manifest(directory)["model_id"]), public_key_b64=public_key_to_b64(publisher)
    )


def demo_rules() -> dict[str, Any]:
    """The default rules, the batch SLA class's requests sent to subtree ``batch``."""
    rules = copy.deepcopy(DEFAULT_RULES)
    for row in rules["policy"]:
        if row["sla_class"] == "batch":
            row["subtree"] = "batch"
    return rules


def rules_bundle(data_dir: Path) -> Path:
    """The router's rules with the classifier trained on the repository's prompts (once, ~15 s; again
    when the demo's rules change)."""
    bundle = data_dir / "router" / "bundle.json"
    rules = demo_rules()
    if bundle.exists() and json.loads(bundle.read_bytes())["policy"] == rules["policy"]:
        return bundle
    bundle.parent.mkdir(parents=True, exist_ok=True)
    rules_file = bundle.with_name("rules.json")
    rules_file.write_text(json.dumps(rules, indent=1))
    advice = io.StringIO()  # onnxruntime's quantiser logs advice that is not for the demo's user
    with contextlib.redirect_stdout(advice), contextlib.redirect_stderr(advice):
        train_bundle(rules_file, bundle)
    return bundle


def start_tree(setup: DemoSetup, platform_url: str, host: str) -> RunningTree:
    data_dir = setup.data_dir
    log_dir = data_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    checkpoint, bundle = model_dir(data_dir), rules_bundle(data_dir)
    dirs = {name: data_dir / name for name in (ROUTER_ID, *EXECUTOR_IDS)}
    for name, directory in dirs.items():
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "agent.key").write_bytes(setup.seeds[name])
        pin_platform_key(platform_url, directory)
    public = {name: public_key_to_b64(private_key_from_seed(seed)) for name, seed in setup.seeds.items()}
    router_url = f"http://{host}:{free_port(host)}"
    common = ["--platform-url", platform_url]

    def executor(name: str, subtree: str) -> list[str]:
        return agent_command(
            dirs[name],
            *("serve", *common, "--agent-id", name, "--data-dir", str(dirs[name])),
            *("--model-dir", str(checkpoint), "--host", host, "--port", str(free_port(host))),
            *("--router-url", router_url, "--router-key", public[ROUTER_ID], "--threads", "1"),
            *("--cache-capacity", "8", "--batch-size", "50", "--batch-age", "0.5", "--quota-leases"),
            *("--subtree", subtree),
        )

    config = dirs[ROUTER_ID] / "tree-config.yaml"
    config.write_text(TREE_CONFIG)
    slots = dirs[ROUTER_ID] / "replica-slots.json"
    slots.write_text(json.dumps({"batch": [{"agent_id": REPLICA, "command": executor(REPLICA, "batch")}]}))
    trusted = [arg for name in EXECUTOR_IDS for arg in ("--executor", f"{name}={public[name]}")]
    commands = {
        ROUTER_ID: agent_command(
            dirs[ROUTER_ID],
            *("router", *common, "--agent-id", ROUTER_ID, "--data-dir", str(dirs[ROUTER_ID])),
            *("--rules", str(bundle), "--host", host, "--port", router_url.rsplit(":", 1)[1], *trusted),
            *("--tree-config", str(config), "--replica-slots", str(slots)),
        ),
        **{name: executor(name, "default") for name in DEFAULT},
        **{name: executor(name, "batch") for name in BATCH},
    }
    processes = {}
    for name, command in commands.items():
        with (log_dir / f"{name}.log").open("ab") as log:
            processes[name] = subprocess.Popen(command, stdout=log, stderr=log)
    manifest = read_manifest(checkpoint)
    model = (str(manifest["model_id"]), str(manifest["weights_sha3"]))
    tree = RunningTree(router_url, processes, dirs, platform_url, log_dir, model)
    try:
        _wait_until_healthy(tree)
    except BaseException:
        tree.stop()
        raise
    return tree


def agent_command(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "compute_agents", "--key-file", str(data_dir / "agent.key"), *args]


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _wait_until_healthy(tree: RunningTree) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for name, process in tree.processes.items():
            if process.poll() is not None:
                log = tree.log_dir / f"{name}.log"
                raise RuntimeError(f"{name} exited ({process.returncode}); see {log}")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            healthy = sum(e["healthy"] for e in tree.get("/tree/executors")["executors"])
            if healthy == len(DEFAULT) + len(BATCH):
                return
        time.sleep(0.2)
    raise RuntimeError(f"the serving tree did not come up within {START_TIMEOUT_S} s; see {tree.log_dir}")
