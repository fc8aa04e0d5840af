"""What the serving tree's scheduler did, as the L1 routers report it (docs/scheduler.md)."""

from __future__ import annotations

from typing import Any

from django.db import models

from agents.models import Agent
from treemeter_records.limits import SLUG_MAX

REASON_MAX = 500
EXECUTORS_MAX = 1024  # the executors of one move, comma-separated agent ids


class SchedulerEvent(models.Model):
    """One move of capacity: a borrow, a return or a scaling step, with the figures that triggered it.

    ``event_id`` is the router's UUIDv7 for it, unique per router: a retried post stores nothing twice.
    ``at`` is the event's instant (UTC, to the microsecond), ``at_ns`` the router's exact nanoseconds."""

    class Kind(models.TextChoices):
        BORROW = "borrow", "Borrow"
        RETURN = "return", "Return"
        SCALE_UP = "scale_up", "Scale up"
        SCALE_DOWN = "scale_down", "Scale down"

    SCALING = (Kind.SCALE_UP, Kind.SCALE_DOWN)

    router = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="scheduler_events")
    event_id = models.UUIDField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    at = models.DateTimeField()
    at_ns = models.BigIntegerField()
    subtree = models.CharField(max_length=SLUG_MAX, help_text="The borrower, or the subtree scaled.")
    executor = models.CharField(
        max_length=EXECUTORS_MAX, blank=True, help_text="The executors lent or given back, comma-separated."
    )
    lender = models.CharField(max_length=SLUG_MAX, blank=True, help_text="A borrow's or return's lender.")
    reason = models.CharField(max_length=REASON_MAX)
    figures = models.JSONField(default=dict, help_text="The numbers behind the move, by name.")
    received_at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["router", "event_id"], name="unique_scheduler_event_per_router")
        ]
        indexes = [
            models.Index(fields=["-at", "-id"], name="scheduler_event_at"),
            models.Index(fields=["subtree", "-at"], name="scheduler_event_subtree_at"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.subtree} at {self.at:%Y-%m-%d %H:%M:%S}"

    @property
    def desired_replicas(self) -> float | None:
        """A scaling step's desired replicas (``figures["desired"]``); None: not a step, or not sent."""
        desired = self.figures.get("desired")
        return desired if self.kind in self.SCALING and _number(desired) else None

    @property
    def executors_moved(self) -> float | None:
        """A borrow's or return's executors: ``figures["executors"]``, else the executor ids it names;
        None for a scaling step."""
        if self.kind in self.SCALING:
            return None
        moved = self.figures.get("executors")
        return moved if _number(moved) else len([name for name in self.executor.split(",") if name])

    @property
    def sla_p99_ms(self) -> float | None:
        """The P99 objective of the subtree its router sent with it (``figures["sla_p99_ms"]``)."""
        objective = self.figures.get("sla_p99_ms")
        return objective if _number(objective) else None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
