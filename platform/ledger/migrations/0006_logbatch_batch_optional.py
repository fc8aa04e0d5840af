"""The link between a signed batch and ingest's answer turns round (the ledger must not know ingest):
first `LogBatch.batch` becomes optional, then ingest/0003-0005 add `IngestBatch.log_batch` and copy the
links, then ledger/0007 drops `LogBatch.batch`."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0002_outbox"),
        ("ledger", "0005_move_disputes_to_billing"),
    ]

    operations = [
        migrations.AlterField(
            model_name="logbatch",
            name="batch",
            field=models.OneToOneField(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="ingest.ingestbatch",
            ),
        ),
    ]
