"""What carries out the autoscaler's steps: something that knows a subtree's replicas and can change them
(a Kubernetes Deployment's scale, ``scheduler.kubernetes``; executor processes on this host,
``tree.supervisor``)."""

from __future__ import annotations

from typing import Protocol


class ScaleFailed(RuntimeError):
    """A read or a change of a subtree's replicas was refused or not answered.

    ``status`` is the HTTP status of a refusal, ``None`` when no answer came (refused, timed out) or when
    no HTTP was involved (a process that could not start)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Actuator(Protocol):
    def subtrees(self) -> tuple[str, ...]:
        """The subtrees it scales: the autoscaler steps only these."""
        ...

    def replicas(self, subtree: str) -> int:
        """The replicas asked for now, those still warming up included."""
        ...

    def scale(self, subtree: str, replicas: int) -> None:
        """Ask for ``replicas``; raises ``ScaleFailed``."""
        ...
