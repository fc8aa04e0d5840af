"""`LogBatch.batch` goes: the link is `IngestBatch.log_batch` now (copied by ingest/0004)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0004_copy_log_batch_links"),
        ("ledger", "0006_logbatch_batch_optional"),
    ]

    operations = [
        migrations.RemoveField(model_name="logbatch", name="batch"),
    ]
