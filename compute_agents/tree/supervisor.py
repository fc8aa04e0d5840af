"""The autoscaler's actuator on one host: executor processes started and stopped by the router.

Each subtree it scales has replica slots, in order, in a JSON file (``--replica-slots``)::

    {"main": [{"agent_id": "exec-c", "command": ["python", "-m", "compute_agents", "serve", "..."],
               "env": {"TREEMETER_...": "..."}}]}

A subtree's replicas are the executors its tree config lists (``fixed``: they run on their own, and
are never stopped here) and the slots' processes running. ``scale(subtree, n)`` starts the first
``n - fixed`` slots' processes that are not running and stops the others, last slot first (SIGTERM, then
SIGKILL after ``stop_timeout_s``). A replica started warms up before it
heartbeats (``Agent.announce``), so the router serves it only once its check has passed; until then it
counts among the replicas and, not heard of yet, as warming. One that exits by itself (a failed warm-up
exits 1) is logged with its exit status and counts no more. Each process's output goes to
``<log_dir>/<agent_id>.log``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
import structlog

from ..scheduler.actuator import ScaleFailed

log = structlog.get_logger("compute_agents.tree.supervisor")


class ReplicaSlotsError(ValueError):
    """The slots file cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class ReplicaSlot:
    agent_id: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


def load_slots(path: Path) -> dict[str, tuple[ReplicaSlot, ...]]:
    """The slots per subtree, or ``ReplicaSlotsError`` naming ``path`` and where in it."""
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as error:
        raise ReplicaSlotsError(f"{path}: cannot be read ({error.strerror})") from None
    except orjson.JSONDecodeError as error:
        raise ReplicaSlotsError(f"{path}: not JSON ({error})") from None
    if not isinstance(data, dict) or not data:
        raise ReplicaSlotsError(f"{path}: must be an object of subtrees, each a list of slots")
    slots: dict[str, tuple[ReplicaSlot, ...]] = {}
    seen: set[str] = set()
    for subtree, entries in data.items():
        if not isinstance(entries, list) or not entries:
            raise ReplicaSlotsError(f"{path}: {subtree}: must be a non-empty list of slots")
        slots[subtree] = tuple(_slot(path, f"{subtree}[{i}]", entry) for i, entry in enumerate(entries))
        for slot in slots[subtree]:
            if slot.agent_id in seen:
                raise ReplicaSlotsError(f"{path}: {subtree}: agent {slot.agent_id!r} has two slots")
            seen.add(slot.agent_id)
    return slots


def _slot(path: Path, at: str, entry: Any) -> ReplicaSlot:
    if not isinstance(entry, dict):
        raise ReplicaSlotsError(f"{path}: {at}: must be an object with agent_id and command")
    unknown = sorted(set(entry) - {"agent_id", "command", "env"})
    if unknown:
        raise ReplicaSlotsError(f"{path}: {at}: unknown field {unknown[0]!r}")
    agent_id, command, env = entry.get("agent_id"), entry.get("command"), entry.get("env", {})
    if not isinstance(agent_id, str) or not agent_id:
        raise ReplicaSlotsError(f"{path}: {at}.agent_id: must be a non-empty string")
    if not isinstance(command, list) or not command or not all(isinstance(a, str) and a for a in command):
        raise ReplicaSlotsError(f"{path}: {at}.command: must be a non-empty list of strings")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ReplicaSlotsError(f"{path}: {at}.env: must be an object of strings")
    return ReplicaSlot(agent_id, tuple(command), env)


@dataclass
class _Running:
    process: subprocess.Popen[bytes]
    output: IO[bytes]


class LocalSupervisor:
    def __init__(
        self,
        slots: Mapping[str, tuple[ReplicaSlot, ...]],
        log_dir: Path,
        fixed: Mapping[str, int] | None = None,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.slots = dict(slots)
        self.fixed = {name: (fixed or {}).get(name, 0) for name in self.slots}
        self.log_dir = log_dir
        self.stop_timeout_s = stop_timeout_s
        self._running: dict[str, _Running] = {}  # by agent id

    def subtrees(self) -> tuple[str, ...]:
        return tuple(self.slots)

    def replicas(self, subtree: str) -> int:
        slots = self._slots(subtree)
        return self.fixed[subtree] + sum(1 for slot in slots if self._alive(slot))

    def scale(self, subtree: str, replicas: int) -> None:
        slots, fixed = self._slots(subtree), self.fixed[subtree]
        if not fixed <= replicas <= fixed + len(slots):
            raise ScaleFailed(
                f"subtree {subtree!r} runs {fixed} executors of its own and has {len(slots)} replica slots: "
                f"{replicas} replicas were asked"
            )
        for slot in slots[: replicas - fixed]:
            if not self._alive(slot):
                self._start(slot)
        for slot in reversed(slots[replicas - fixed :]):
            self._stop(slot)

    def stop_all(self) -> None:
        for slots in self.slots.values():
            for slot in reversed(slots):
                self._stop(slot)

    def _slots(self, subtree: str) -> tuple[ReplicaSlot, ...]:
        try:
            return self.slots[subtree]
        except KeyError:
            raise ScaleFailed(f"no replica slots for subtree {subtree!r}") from None

    def _alive(self, slot: ReplicaSlot) -> bool:
        running = self._running.get(slot.agent_id)
        if running is None:
            return False
        status = running.process.poll()
        if status is None:
            return True
        log.warning("replica_exited", agent_id=slot.agent_id, status=status)
        running.output.close()
        del self._running[slot.agent_id]
        return False

    def _start(self, slot: ReplicaSlot) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        output = (self.log_dir / f"{slot.agent_id}.log").open("ab")
        try:
            process = subprocess.Popen(
                slot.command, env={**os.environ, **slot.env}, stdout=output, stderr=subprocess.STDOUT
            )
        except OSError as error:
            output.close()
            raise ScaleFailed(f"replica {slot.agent_id!r} could not start: {error}") from None
        self._running[slot.agent_id] = _Running(process, output)
        log.info("replica_started", agent_id=slot.agent_id, pid=process.pid)

    def _stop(self, slot: ReplicaSlot) -> None:
        running = self._running.pop(slot.agent_id, None)
        if running is None:
            return
        running.process.terminate()
        try:
            running.process.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            running.process.kill()
            running.process.wait()
        running.output.close()
        log.info("replica_stopped", agent_id=slot.agent_id, status=running.process.returncode)
