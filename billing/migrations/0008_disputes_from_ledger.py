"""Dispute, DisputeEvent and BillingExclusion move from the ledger app to billing (they read invoices
and lead to credit notes). Their tables stay as they are (`ledger_dispute`, `ledger_disputeevent`,
`ledger_billingexclusion`, with their rows, indexes and constraints): only Django's state moves.
The ledger's side is ledger/0005_move_disputes_to_billing."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_apitoken_membership"),
        ("billing", "0007_stripe_notes_debit_charges"),
        ("ledger", "0005_move_disputes_to_billing"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="Dispute",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("reason", models.TextField()),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("open", "Open"),
                                    ("rejected", "Rejected"),
                                    ("accepted", "Accepted"),
                                    ("excluded", "Records excluded (customer dependency)"),
                                ],
                                default="open",
                                max_length=16,
                            ),
                        ),
                        ("evidence", models.JSONField()),
                        ("credited", models.DecimalField(decimal_places=2, default=0, max_digits=20)),
                        ("opened_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "credit_note",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="disputes",
                                to="billing.note",
                            ),
                        ),
                        (
                            "invoice",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="disputes",
                                to="billing.invoice",
                            ),
                        ),
                        (
                            "line",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="disputes",
                                to="billing.invoiceline",
                            ),
                        ),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="disputes",
                                to="accounts.tenant",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "ledger_dispute",
                        "ordering": ["-opened_at", "-id"],
                    },
                ),
                migrations.CreateModel(
                    name="BillingExclusion",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("record_id", models.UUIDField(unique=True)),
                        ("tenant", models.CharField(max_length=64)),
                        ("contract", models.CharField(max_length=64)),
                        ("start_ns", models.BigIntegerField()),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "dispute",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="exclusions",
                                to="billing.dispute",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "ledger_billingexclusion",
                    },
                ),
                migrations.CreateModel(
                    name="DisputeEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("action", models.CharField(max_length=32)),
                        ("detail", models.JSONField(default=dict)),
                        ("at", models.DateTimeField(auto_now_add=True)),
                        (
                            "actor",
                            models.ForeignKey(
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "dispute",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="events",
                                to="billing.dispute",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "ledger_disputeevent",
                        "ordering": ["dispute", "id"],
                    },
                ),
                migrations.AddConstraint(
                    model_name="dispute",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("status", "open")),
                        fields=("line",),
                        name="one_open_dispute_per_line",
                    ),
                ),
                migrations.AddIndex(
                    model_name="billingexclusion",
                    index=models.Index(
                        fields=["tenant", "contract", "start_ns"], name="ledger_bill_tenant_19b7d0_idx"
                    ),
                ),
            ],
        )
    ]
