"""The gate task: every few minutes, each plan's stage in force is judged (docs/releases.md)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from .services import evaluate_release_gates


@shared_task(name="releases.evaluate_gates")
def evaluate_gates() -> dict[str, str]:
    """Plan code → the verdict of its stage in force (failures hold, automatic passes promote)."""
    return evaluate_release_gates(timezone.now())
