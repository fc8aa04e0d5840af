"""The Celery app. Without CELERY_BROKER_URL, tasks run in-process (eager)."""

import os

from celery import Celery
from celery.signals import worker_init

from metrics.exposition import serve_worker_metrics

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("treemeter")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _serve_metrics(**_: object) -> None:
    """A worker's Prometheus exposition (the invoice runs its children execute), when configured."""
    serve_worker_metrics()


@app.task(name="treemeter.runtime_info")
def runtime_info() -> dict[str, str]:
    """Health probe for workers: which Python and which `platform` module the worker really runs."""
    import platform

    return {
        "platform_system": platform.system(),
        "platform_module": platform.__file__ or "",
        "python": platform.python_version(),
    }
