"""What the scheduler did, as events: each move of capacity (a borrow, a return, a scaling step) with the
subtree, the executor where one moved, the reason, and the figures that triggered it. The router logs
them, counts them at ``/metrics`` and ships them to the platform; the simulation counts them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

BORROW, RETURN, SCALE_UP, SCALE_DOWN = "borrow", "return", "scale_up", "scale_down"
KINDS = (BORROW, RETURN, SCALE_UP, SCALE_DOWN)


@dataclass(frozen=True)
class SchedulerEvent:
    kind: str
    at: float  # the scheduler's clock, seconds
    subtree: str  # the borrower, or the subtree scaled
    reason: str
    figures: dict[str, float] = field(default_factory=dict)
    executor: str | None = None  # the executors lent or given back, comma-separated
    lender: str | None = None  # a borrow's or a return's other subtree

    def as_json(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}
