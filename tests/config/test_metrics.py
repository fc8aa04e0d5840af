"""GET /metrics: what ingest, the log and the invoice run show Prometheus, and who may read it."""

from __future__ import annotations

import copy
import socket
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from django.test import Client, override_settings
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from billing.invoice_run import invoice_contracts
from ledger.services import publish_checkpoint
from metrics.exposition import serve_worker_metrics
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ingest.support import post, signed

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(client: Client, token: str | None = None) -> Samples:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_ingest_answers_the_log_and_the_queue_are_shown(client: Client) -> None:
    contract: Any = ContractFactory()
    agent: SigningAgent = signing_agent(contract)
    before = {
        "ok": _value("treemeter_ingest_batches_total", status="200", code="ok"),
        "replay": _value("treemeter_ingest_batches_total", status="200", code="replay"),
        "refused": _value("treemeter_ingest_batches_total", status="400", code="malformed_batch"),
        "accepted": _value("treemeter_ingest_records_total", outcome="accepted"),
        "rejected": _value("treemeter_ingest_records_total", outcome="rejected"),
        "negative": _value("treemeter_ingest_rejections_total", reason="negative_value"),
        "latency": _value("treemeter_ingest_batch_seconds_count"),
    }
    records = [agent.record(contract) for _ in range(3)]
    bad: dict[str, Any] = copy.deepcopy(records[2])
    bad["tokens_in"] = -1
    body = signed(agent, [*records[:2], bad])
    assert post(client, body).status_code == 200
    assert post(client, body).status_code == 200  # the replay: counted as such, its records not again
    assert post(client, b"not a batch").status_code == 400
    publish_checkpoint("manual")

    samples = _scrape(client)
    key: tuple[str, tuple[tuple[str, str], ...]]
    key = ("treemeter_ingest_batches_total", (("code", "ok"), ("status", "200")))
    assert samples[key] == before["ok"] + 1
    key = ("treemeter_ingest_batches_total", (("code", "replay"), ("status", "200")))
    assert samples[key] == before["replay"] + 1
    key = ("treemeter_ingest_batches_total", (("code", "malformed_batch"), ("status", "400")))
    assert samples[key] == before["refused"] + 1
    assert samples[("treemeter_ingest_records_total", (("outcome", "accepted"),))] == before["accepted"] + 2
    assert samples[("treemeter_ingest_records_total", (("outcome", "rejected"),))] == before["rejected"] + 1
    key = ("treemeter_ingest_rejections_total", (("reason", "negative_value"),))
    assert samples[key] == before["negative"] + 1
    assert samples[("treemeter_ingest_batch_seconds_count", ())] == before["latency"] + 3
    assert samples[("treemeter_log_size", ())] == 2
    assert 0 <= samples[("treemeter_checkpoint_age_seconds", ())] < 60
    assert samples[("treemeter_celery_queue_depth", ())] == 0  # tests run tasks in-process


def test_the_invoice_run_shows_its_progress_and_duration(client: Client) -> None:
    runs = _value("treemeter_invoice_run_seconds_count")
    start, end = datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC)
    contracts: list[Any] = [ContractFactory(), ContractFactory()]
    invoice_contracts(contracts, start, end, {}, now=datetime(2026, 11, 2, tzinfo=UTC))
    samples = _scrape(client)
    assert samples[("treemeter_invoice_run_seconds_count", ())] == runs + 1
    assert samples[("treemeter_invoice_run_contracts", (("state", "total"),))] == 2
    assert samples[("treemeter_invoice_run_contracts", (("state", "done"),))] == 2


@override_settings(METRICS_TOKEN="s3cret-metrics")
def test_a_configured_token_is_required(client: Client) -> None:
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused.json()["code"] == "metrics_token_required"
    assert refused["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    _scrape(client, "s3cret-metrics")


@override_settings(DEVELOPMENT=False, METRICS_TOKEN="")
def test_production_without_a_token_serves_nothing(client: Client) -> None:
    response = client.get("/metrics")
    assert response.status_code == 403
    assert response.json() == {
        "code": "metrics_disabled",
        "message": "Set METRICS_TOKEN to serve /metrics in production.",
        "details": {},
    }


def test_a_celery_worker_serves_what_its_processes_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("WORKER_METRICS_PORT", str(port))
    serve_worker_metrics()
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    assert "treemeter_invoice_run_seconds_bucket" in text
    assert "treemeter_ingest_batches_total" in text or "# TYPE treemeter_ingest_batches counter" in text
