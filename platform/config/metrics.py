"""`GET /metrics`: the platform's Prometheus exposition.

What ingest and the invoice run record (metrics.instruments), summed over the processes when
`PROMETHEUS_MULTIPROC_DIR` is set (gunicorn workers, Celery prefork children), and what is read at
scrape time: the log's size, the age of its latest checkpoint and the Celery queue's depth.

Protected by `METRICS_TOKEN` (`Authorization: Bearer <token>`): required in production, where the
endpoint answers 403 `metrics_disabled` while no token is configured; in development it is open unless
a token is set. docker/prometheus.yml scrapes it, and the Celery worker's own exposition
(`WORKER_METRICS_PORT`, config.celery) for the invoice runs it executes.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.errors import error_response
from ledger.selectors import log_head
from metrics.exposition import recorded

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class PlatformCollector(Collector):
    """Gauges read when scraped: the log's size, the checkpoint's age, the Celery queue's depth."""

    def collect(self) -> Iterator[Metric]:
        size, signed = log_head()
        yield GaugeMetricFamily("treemeter_log_size", "Leaves in the verifiable log.", value=size)
        if signed is not None:
            age = (timezone.now() - signed).total_seconds()
            yield GaugeMetricFamily(
                "treemeter_checkpoint_age_seconds", "Seconds since the latest signed checkpoint.", value=age
            )
        depth = _queue_depth()
        if depth is not None:
            yield GaugeMetricFamily(
                "treemeter_celery_queue_depth",
                "Tasks waiting in the Celery queue (0: tasks run in-process).",
                value=depth,
            )


def _queue_depth() -> int | None:
    """Tasks waiting in the default queue of a Redis broker; 0 when tasks run in-process; None when the
    broker cannot be read (another transport, or Redis down: the gauge is left out of the scrape)."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return 0
    url = settings.CELERY_BROKER_URL
    if not url.startswith(("redis://", "rediss://")):
        return None
    try:
        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        return int(client.llen(settings.CELERY_TASK_DEFAULT_QUEUE))
    except redis.RedisError:
        return None


_platform = CollectorRegistry()  # no auto_describe: collecting reads the database, at scrape time only
_platform.register(PlatformCollector())


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.METRICS_TOKEN
    if not token and not settings.DEVELOPMENT:
        return error_response(403, "metrics_disabled", "Set METRICS_TOKEN to serve /metrics in production.")
    if token:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            response = error_response(
                401, "metrics_token_required", "Send Authorization: Bearer <METRICS_TOKEN>."
            )
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    return HttpResponse(generate_latest(recorded()) + generate_latest(_platform), content_type=CONTENT_TYPE)
