"""`IngestBatch.log_batch`: the signed batch in the log, the link that was `LogBatch.batch` (ledger/0006
made that optional; 0004 copies the links, 0005 makes this one required, ledger/0007 drops the old one)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0002_outbox"),
        ("ledger", "0006_logbatch_batch_optional"),
    ]

    operations = [
        migrations.AddField(
            model_name="ingestbatch",
            name="log_batch",
            field=models.OneToOneField(
                null=True,
                help_text="The batch as signed, in the verifiable log (ledger.services.keep_signed_batch).",
                on_delete=django.db.models.deletion.PROTECT,
                related_name="ingest_batch",
                to="ledger.logbatch",
            ),
        ),
    ]
