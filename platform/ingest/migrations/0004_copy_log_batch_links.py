"""Copy each signed batch's link from `LogBatch.batch` to `IngestBatch.log_batch` (and back when
unapplied), one UPDATE each way. Its own migration, so the schema changes around it run in other
transactions than the rows it updates."""

from typing import Any

from django.db import migrations
from django.db.models import OuterRef, Subquery


def copy_forward(apps: Any, schema_editor: Any) -> None:
    IngestBatch = apps.get_model("ingest", "IngestBatch")
    LogBatch = apps.get_model("ledger", "LogBatch")
    IngestBatch.objects.update(
        log_batch=Subquery(LogBatch.objects.filter(batch=OuterRef("pk")).values("pk")[:1])
    )


def copy_back(apps: Any, schema_editor: Any) -> None:
    IngestBatch = apps.get_model("ingest", "IngestBatch")
    LogBatch = apps.get_model("ledger", "LogBatch")
    LogBatch.objects.update(
        batch=Subquery(IngestBatch.objects.filter(log_batch=OuterRef("pk")).values("pk")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0003_ingestbatch_log_batch"),
    ]

    operations = [
        migrations.RunPython(copy_forward, copy_back),
    ]
