"""Dispute, DisputeEvent and BillingExclusion leave the ledger's state for billing's
(billing/0008_disputes_from_ledger); their tables and rows stay where they are."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0004_unique_leaves"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name="BillingExclusion"),
                migrations.DeleteModel(name="DisputeEvent"),
                migrations.DeleteModel(name="Dispute"),
            ],
        )
    ]
