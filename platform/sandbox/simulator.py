"""The sandbox's traffic simulator: each sandbox's business events of the day, sent through the real
serving path (the L1 router or an agent, `settings.SANDBOX_SERVING_URL`) with the sandbox's own keys,
so its records are signed, shipped and ingested like any other, into the sandbox's store.

An event goes to one of the sandbox's packages in turn, one call per required capability with the event
id: a completion for a MoE capability (its model, a contract-review prompt, decoded greedily so that a
prompt always gets the same answer), an invocation for an ONNX capability (inputs of its declared
shapes). A package without capabilities is not simulated. Traffic due over a pause longer than a day
is not caught up beyond one day's worth."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx

from catalog.models import Capability, PackageCapability

from .models import Sandbox

DAY = timedelta(days=1)
PROMPTS = (
    "Review the payment clause: the party shall pay each invoice within thirty days.",
    "合同审查：付款条款与责任条款是否一致？",
    "Summarise the liability and indemnity terms of the agreement.",
)
MAX_TOKENS = 16


@dataclass(frozen=True)
class Simulated:
    events: int
    calls: int
    statuses: dict[int, int]  # HTTP status → calls


def due_events(sandbox: Sandbox, now: datetime) -> int:
    """The events due since the simulator last caught up, at most a day's worth."""
    elapsed = min(now - sandbox.simulated_until, DAY)  # a longer pause is not caught up
    return int(sandbox.daily_events * elapsed / DAY) if elapsed > timedelta(0) else 0


def simulate(sandbox: Sandbox, client: httpx.Client, now: datetime) -> Simulated:
    """Send the events due (`due_events`) through `client` (based at the serving path) and move the
    sandbox's clock on by what they cover, so the rest of the day's share comes next time."""
    count = due_events(sandbox, now)
    plan = _calls_per_package(sandbox)
    statuses: dict[int, int] = {}
    calls = 0
    if count and plan:
        packages = sorted(plan)
        for number in range(count):
            package = packages[number % len(packages)]
            event_id = f"sim-{now:%Y%m%dT%H%M%S}-{number}"
            headers = {"Authorization": f"Bearer {sandbox.simulator_keys[package]}", "X-Request-Id": event_id}
            for capability in plan[package]:
                path, body = _call(capability, event_id, number)
                status = client.post(path, json=body, headers=headers).status_code
                statuses[status] = statuses.get(status, 0) + 1
                calls += 1
    since = max(sandbox.simulated_until, now - DAY)  # a longer pause is not caught up
    until = since + DAY * count / sandbox.daily_events if sandbox.daily_events else now
    sent = sandbox.events_sent + count
    Sandbox.objects.filter(pk=sandbox.pk).update(simulated_until=until, events_sent=sent)
    return Simulated(count, calls, statuses)


def _calls_per_package(sandbox: Sandbox) -> dict[str, list[Capability]]:
    """Per package with a simulator key and required capabilities: those capabilities."""
    links = PackageCapability.objects.filter(
        package__code__in=list(sandbox.simulator_keys), required=True
    ).select_related("package", "capability")
    found: dict[str, list[Capability]] = {}
    for link in links.order_by("package__code", "capability__code"):
        found.setdefault(link.package.code, []).append(link.capability)
    return found


def _call(capability: Capability, event_id: str, number: int) -> tuple[str, dict[str, Any]]:
    if capability.engine == Capability.Engine.ONNX:
        inputs = sample_inputs(capability.input_schema)
        return f"/v1/capabilities/{capability.code}/invocations", {"inputs": inputs, "event_id": event_id}
    prompt = PROMPTS[number % len(PROMPTS)]
    body = {"model": capability.model_id, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
    return "/v1/completions", body


def sample_inputs(schema: dict[str, Any]) -> dict[str, Any]:
    """Inputs of the shapes the capability declares (`x-shape`, a free size taken as 1), filled with
    0.5 (numbers), 1 (integers) or true."""
    fill = {"number": 0.5, "integer": 1, "boolean": True}
    inputs = {}
    for name, node in schema.get("properties", {}).items():
        leaf = node
        while leaf.get("type") == "array":
            leaf = leaf["items"]
        value: Any = fill.get(leaf.get("type", "number"), 0.5)
        for size in reversed(node.get("x-shape", [])):
            value = [value] * (size or 1)
        inputs[name] = value
    return inputs
