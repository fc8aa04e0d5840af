"""Where the recorded instruments are read from: this process's registry, or, with
`PROMETHEUS_MULTIPROC_DIR` set, the sum over every process writing there (gunicorn workers, Celery
prefork children)."""

from __future__ import annotations

import os

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector


def recorded() -> CollectorRegistry:
    """The registry holding what the instruments recorded, in this process or in all of them."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    return registry


def serve_worker_metrics() -> None:
    """Serve the recorded instruments on `WORKER_METRICS_PORT` (a Celery worker's main process: its
    children run the tasks and write to the multiprocess directory); nothing when the port is unset."""
    port = os.environ.get("WORKER_METRICS_PORT", "")
    if port:
        start_http_server(int(port), registry=recorded())
