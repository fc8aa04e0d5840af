"""Every batch ingest answered was kept in the log in the same transaction, so every row has its link."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0004_copy_log_batch_links"),
        ("ledger", "0007_remove_logbatch_batch"),
    ]

    operations = [
        migrations.AlterField(
            model_name="ingestbatch",
            name="log_batch",
            field=models.OneToOneField(
                help_text="The batch as signed, in the verifiable log (ledger.services.keep_signed_batch).",
                on_delete=django.db.models.deletion.PROTECT,
                related_name="ingest_batch",
                to="ledger.logbatch",
            ),
        ),
    ]
