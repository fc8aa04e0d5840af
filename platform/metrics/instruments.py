"""The platform's Prometheus instruments, in one place: what ingest and the invoice run count and time.

Each process keeps its own values (prometheus-client); under gunicorn or a Celery prefork worker, set
`PROMETHEUS_MULTIPROC_DIR` to an empty directory writable by every process and the `/metrics` view sums
them (docs/observability.md). Values read at scrape time (log size, checkpoint age, queue depth) are
`config.metrics`'s, which may read every package. Rates (records/s) are Prometheus's: `rate()` over these
counters. Imports prometheus-client only, so every layer may record.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

INGEST_RECORDS = Counter(
    "treemeter_ingest_records",
    "Records of answered ingest batches, by outcome (accepted, duplicate, rejected).",
    ["outcome"],
)
INGEST_BATCHES = Counter(
    "treemeter_ingest_batches",
    "Ingest batches answered, by HTTP status and code (ok, all_records_rejected or the refusal's code).",
    ["status", "code"],
)
INGEST_REJECTIONS = Counter(
    "treemeter_ingest_rejections", "Rejected records, by reason code (docs/record-format.md).", ["reason"]
)
INGEST_BATCH_SECONDS = Histogram(
    "treemeter_ingest_batch_seconds",
    "Time to answer one ingest batch (verify, validate, commit, store).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
INVOICE_RUN_SECONDS = Histogram(
    "treemeter_invoice_run_seconds",
    "Duration of an invoice run over a month's contracts.",
    buckets=(0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0),
)
INVOICE_RUN_CONTRACTS = Gauge(
    "treemeter_invoice_run_contracts",
    "The latest invoice run's contracts: total, and done so far (equal once it has finished).",
    ["state"],
    multiprocess_mode="mostrecent",
)
MANIFEST_REFUSALS = Counter(
    "treemeter_manifest_refusals",
    "Checkpoint manifests agents refused to load, by reason (unsigned, malformed_signature, unknown_key, "
    "bad_signature), as the agents reported them.",
    ["reason"],
)
