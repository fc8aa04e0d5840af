"""Gray releases at admission: a key whose contract package is in a gray release (the snapshot's
``release``, treemeter_records.protocol) reaches only the capabilities its stage turns on, each capped
per UTC hour.

The calls are counted here, in memory, per (contract, package, model id) and UTC hour: every key of the
package counts together, as the plan caps the package, not a key. Each agent enforces its own share of a
cap (``hourly_cap``): the platform divides the plan's cap among the executors bound to the contract, so
that the shares add up to the plan's cap (``plan_hourly_cap``) without agents asking each other or the
platform before each call. The cost of that choice: an agent whose share is spent refuses while another
may still have room (uneven load), and a restarted agent starts the hour's count again, so an hour may
see up to one more share of calls. A call counts when it is admitted, whatever then becomes of it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from treemeter_records.protocol import RELEASE_FIELDS

from .wire import ApiError

HOUR_NS = 3600 * 10**9


@dataclass(frozen=True)
class Release:
    """The stage in force for a key's package: the model ids that are on and this agent's hourly cap of
    each (None: no cap)."""

    plan: str
    stage: int
    caps: tuple[tuple[str, int | None], ...]

    @classmethod
    def from_snapshot(cls, entry: Any) -> Release:
        """A key's ``release`` entry; ValueError when it has another shape."""
        if (
            not isinstance(entry, dict)
            or set(entry) != RELEASE_FIELDS
            or not isinstance(entry["models"], list)
        ):
            raise ValueError("release must be {plan, stage, models: [...]}")
        caps: list[tuple[str, int | None]] = []
        for model in entry["models"]:
            cap = model.get("hourly_cap") if isinstance(model, dict) else None
            if (
                not isinstance(model, dict)
                or not isinstance(model.get("model_id"), str)
                or not (cap is None or isinstance(cap, int))
            ):
                raise ValueError("release models must be {model_id, hourly_cap, plan_hourly_cap}")
            caps.append((model["model_id"], cap))
        return cls(str(entry["plan"]), int(entry["stage"]), tuple(caps))

    def cap_of(self, model_id: str) -> tuple[bool, int | None]:
        """Whether the model is on in the stage, and its hourly cap on this agent."""
        for on, cap in self.caps:
            if on == model_id:
                return True, cap
        return False, None


def not_released(release: Release, model_id: str) -> ApiError:
    return ApiError(
        403,
        "invalid_request_error",
        "capability_not_released",
        f"The capability `{model_id}` is not on in stage {release.stage} of the release plan "
        f"`{release.plan}`.",
        "model",
    )


def cap_reached(release: Release, model_id: str, cap: int, now_ns: int) -> ApiError:
    retry_after = max(1, (HOUR_NS - now_ns % HOUR_NS) // 10**9)
    return ApiError(
        429,
        "rate_limit_exceeded",
        "hourly_cap_reached",
        f"The capability `{model_id}` is capped at {cap} calls per hour in stage {release.stage} of the "
        f"release plan `{release.plan}`; the cap starts again at the next UTC hour.",
        headers={"Retry-After": str(retry_after), "x-should-retry": "false"},
    )


class HourlyCalls:
    """Calls admitted under a gray release, per (contract, package, model id), in the current UTC hour."""

    def __init__(self) -> None:
        self.hour = -1
        self.counts: dict[tuple[str, str, str], int] = {}
        self.lock = threading.Lock()

    def take(self, contract: str, package: str, release: Release | None, model_id: str, now_ns: int) -> bool:
        """Count one call, or refuse it: 403 ``capability_not_released`` for a model the stage does not
        turn on, 429 ``hourly_cap_reached`` above its cap. True when a call was counted (give it back if
        it is refused later in admission); False without a release."""
        if release is None:
            return False
        on, cap = release.cap_of(model_id)
        if not on:
            raise not_released(release, model_id)
        slot = (contract, package, model_id)
        with self.lock:
            self._turn(now_ns)
            taken = self.counts.get(slot, 0)
            if cap is not None and taken >= cap:
                raise cap_reached(release, model_id, cap, now_ns)
            self.counts[slot] = taken + 1
        return True

    def give_back(self, contract: str, package: str, model_id: str, now_ns: int) -> None:
        """Uncount a call that ``take`` counted and admission then refused (in the same hour)."""
        slot = (contract, package, model_id)
        with self.lock:
            if now_ns // HOUR_NS == self.hour and self.counts.get(slot):
                self.counts[slot] -= 1

    def count(self, contract: str, package: str, model_id: str) -> int:
        """Calls counted this hour (for the metrics and the tests)."""
        with self.lock:
            return self.counts.get((contract, package, model_id), 0)

    def _turn(self, now_ns: int) -> None:
        """A new UTC hour starts every count again (a call that started just before it counts in it)."""
        hour = now_ns // HOUR_NS
        if hour > self.hour:
            self.hour, self.counts = hour, {}
