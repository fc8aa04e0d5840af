# Credit notes' Stripe rows become notes' Stripe rows: debit notes are charged as PaymentIntents of their own.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0006_stripe_credit_notes"),
    ]

    operations = [
        migrations.RenameModel("StripeCreditNote", "StripeNote"),
        migrations.AlterField(
            model_name="stripenote",
            name="note",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.PROTECT, related_name="stripe_note", to="billing.note"
            ),
        ),
        migrations.AlterField(
            model_name="stripenote",
            name="action",
            field=models.CharField(
                blank=True,
                choices=[
                    ("refund", "Refund of the paid PaymentIntent"),
                    ("reduce", "PaymentIntent amount lowered"),
                    ("cancel", "PaymentIntent canceled (credited in full)"),
                    ("charge", "PaymentIntent of its own (debit note)"),
                ],
                max_length=8,
            ),
        ),
        migrations.AlterField(
            model_name="stripenote",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Not pushed yet"),
                    ("pushed", "Sent to Stripe"),
                    ("skipped", "Nothing to send: the invoice has no open or paid PaymentIntent"),
                    ("paid", "Debit note paid"),
                    ("failed", "Failed (see last error)"),
                ],
                default="pending",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="stripenote",
            name="amount",
            field=models.DecimalField(
                blank=True,
                decimal_places=2,
                help_text="The amount refunded or charged, or the PaymentIntent's amount after the change.",
                max_digits=20,
                null=True,
            ),
        ),
    ]
