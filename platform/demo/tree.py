"""The serving tree of the demo, as real processes: one L1 router (`python -m compute_agents router`,
with the semantic classifier trained once into the data dir) and two executors (`serve --router-url`)
on a tiny local MoE checkpoint. Each is a registered agent with its own key, spool and shipper, posting
to the demo's ingest API; the router is registered as kind ``router``."""

from __future__ import annotations

import contextlib
import io
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from compute_agents.checkpoint import MANIFEST, create_tiny_model, read_manifest
from compute_agents.classifier.train import train_bundle
from compute_agents.runtime import pin_platform_key
from treemeter_records import private_key_from_seed, public_key_to_b64

from .services import EXECUTOR_IDS, ROUTER_ID, DemoSetup

START_TIMEOUT_S = 120


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
    """The tiny checkpoint, created once and kept in the data dir."""
    directory = data_dir / "agent" / "model"
    if not (directory / MANIFEST).exists():
        create_tiny_model(directory)
    return directory


def rules_bundle(data_dir: Path) -> Path:
    """The router's rules with the classifier trained on the repository's prompts (once, ~15 s)."""
    bundle = data_dir / "router" / "bundle.json"
    if not bundle.exists():
        bundle.parent.mkdir(parents=True, exist_ok=True)
        advice = io.StringIO()  # onnxruntime's quantiser logs advice that is not for the demo's user
        with contextlib.redirect_stdout(advice), contextlib.redirect_stderr(advice):
            train_bundle(None, bundle)
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
    trusted = [arg for name in EXECUTOR_IDS for arg in ("--executor", f"{name}={public[name]}")]
    common = ["--platform-url", platform_url]
    commands = {
        ROUTER_ID: [
            *("router", *common, "--agent-id", ROUTER_ID, "--data-dir", str(dirs[ROUTER_ID])),
            *("--rules", str(bundle), "--host", host, "--port", router_url.rsplit(":", 1)[1], *trusted),
        ],
    }
    for name in EXECUTOR_IDS:
        commands[name] = [
            *("serve", *common, "--agent-id", name, "--data-dir", str(dirs[name])),
            *("--model-dir", str(checkpoint), "--host", host, "--port", str(free_port(host))),
            *("--router-url", router_url, "--router-key", public[ROUTER_ID], "--threads", "1"),
            *("--cache-capacity", "8", "--batch-size", "50", "--batch-age", "0.5", "--quota-leases"),
        ]
    processes = {}
    for name, command in commands.items():
        with (log_dir / f"{name}.log").open("ab") as log:
            processes[name] = subprocess.Popen(agent_command(dirs[name], *command), stdout=log, stderr=log)
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
            if sum(e["healthy"] for e in tree.get("/tree/executors")["executors"]) == len(EXECUTOR_IDS):
                return
        time.sleep(0.2)
    raise RuntimeError(f"the serving tree did not come up within {START_TIMEOUT_S} s; see {tree.log_dir}")
