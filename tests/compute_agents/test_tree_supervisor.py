"""The local supervisor (compute_agents.tree.supervisor): real child processes started in slot order,
stopped last first, one that exits by itself no longer counted; a slots file that cannot be used is
refused naming the file and the entry. (The router driving it over real executors: test_tree_chaos.)"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from compute_agents.scheduler.actuator import ScaleFailed
from compute_agents.tree.supervisor import LocalSupervisor, ReplicaSlotsError, load_slots

SLEEPER = [sys.executable, "-c", "import sys, time; print(sys.argv[1], flush=True); time.sleep(60)"]


def slots_file(tmp_path: Path, content: object) -> Path:
    path = tmp_path / "slots.json"
    path.write_text(json.dumps(content))
    return path


def test_scale_starts_slots_in_order_and_stops_the_last_first(tmp_path: Path) -> None:
    path = slots_file(
        tmp_path,
        {"main": [{"agent_id": name, "command": [*SLEEPER, name]} for name in ("r-1", "r-2", "r-3")]},
    )
    supervisor = LocalSupervisor(load_slots(path), tmp_path / "replicas", stop_timeout_s=5)
    try:
        assert supervisor.subtrees() == ("main",) and supervisor.replicas("main") == 0
        supervisor.scale("main", 2)
        assert supervisor.replicas("main") == 2
        for name in ("r-1", "r-2"):  # each runs its own command, its output in its log
            log = tmp_path / "replicas" / f"{name}.log"
            deadline = time.monotonic() + 20
            while log.read_text() != f"{name}\n":
                assert time.monotonic() < deadline
                time.sleep(0.02)
        first = supervisor._running["r-1"].process
        supervisor.scale("main", 3)
        supervisor.scale("main", 1)
        assert supervisor.replicas("main") == 1
        assert supervisor._running["r-1"].process is first  # kept running through both steps
        assert set(supervisor._running) == {"r-1"}
        first.kill()
        first.wait()
        assert supervisor.replicas("main") == 0  # exited by itself: counted no more
        with pytest.raises(ScaleFailed, match="runs 0 executors of its own and has 3 replica slots: 4"):
            supervisor.scale("main", 4)
        with pytest.raises(ScaleFailed, match="no replica slots for subtree 'other'"):
            supervisor.scale("other", 1)
    finally:
        supervisor.stop_all()
    assert supervisor._running == {}


def test_the_configs_own_executors_count_and_are_never_stopped(tmp_path: Path) -> None:
    path = slots_file(tmp_path, {"main": [{"agent_id": "r-1", "command": [*SLEEPER, "r-1"]}]})
    supervisor = LocalSupervisor(load_slots(path), tmp_path / "replicas", {"main": 2}, stop_timeout_s=5)
    try:
        assert supervisor.replicas("main") == 2
        supervisor.scale("main", 2)  # its own two: nothing to start
        assert supervisor._running == {}
        supervisor.scale("main", 3)
        assert supervisor.replicas("main") == 3 and set(supervisor._running) == {"r-1"}
        with pytest.raises(ScaleFailed, match="runs 2 executors of its own and has 1 replica slots: 1"):
            supervisor.scale("main", 1)
        assert supervisor.replicas("main") == 3
    finally:
        supervisor.stop_all()


def test_a_command_that_cannot_start_is_scale_failed(tmp_path: Path) -> None:
    path = slots_file(tmp_path, {"main": [{"agent_id": "r-1", "command": [str(tmp_path / "missing")]}]})
    supervisor = LocalSupervisor(load_slots(path), tmp_path / "replicas")
    with pytest.raises(ScaleFailed, match="replica 'r-1' could not start"):
        supervisor.scale("main", 1)
    assert supervisor.replicas("main") == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ([], "must be an object of subtrees"),
        ({"main": []}, "main: must be a non-empty list of slots"),
        ({"main": ["x"]}, r"main\[0\]: must be an object"),
        ({"main": [{"command": ["x"]}]}, r"main\[0\].agent_id: must be a non-empty string"),
        ({"main": [{"agent_id": "a", "command": "serve"}]}, r"main\[0\].command: must be a non-empty list"),
        (
            {"main": [{"agent_id": "a", "command": ["x"], "env": {"A": 1}}]},
            r"main\[0\].env: must be an object",
        ),
        ({"main": [{"agent_id": "a", "command": ["x"], "port": 1}]}, r"main\[0\]: unknown field 'port'"),
        (
            {"main": [{"agent_id": "a", "command": ["x"]}], "cpu": [{"agent_id": "a", "command": ["y"]}]},
            "cpu: agent 'a' has two slots",
        ),
    ],
)
def test_a_slots_file_that_cannot_be_used_names_the_entry(
    tmp_path: Path, content: object, message: str
) -> None:
    path = slots_file(tmp_path, content)
    with pytest.raises(ReplicaSlotsError, match=message) as refused:
        load_slots(path)
    assert str(refused.value).startswith(f"{path}: ")


def test_a_slots_file_that_is_missing_or_not_json_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ReplicaSlotsError, match="cannot be read"):
        load_slots(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ReplicaSlotsError, match="not JSON"):
        load_slots(tmp_path / "bad.json")
