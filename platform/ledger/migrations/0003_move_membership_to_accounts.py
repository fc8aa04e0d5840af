"""Tenant membership moves to accounts.Membership (with a role); existing members become owners."""

from typing import Any

from django.db import migrations


def copy_memberships(apps: Any, schema_editor: Any) -> None:
    old = apps.get_model("ledger", "TenantMembership")
    new = apps.get_model("accounts", "Membership")
    for row in old.objects.all():
        new.objects.get_or_create(user_id=row.user_id, defaults={"tenant_id": row.tenant_id, "role": "owner"})


def copy_back(apps: Any, schema_editor: Any) -> None:
    old = apps.get_model("ledger", "TenantMembership")
    new = apps.get_model("accounts", "Membership")
    for row in new.objects.all():
        old.objects.get_or_create(user_id=row.user_id, defaults={"tenant_id": row.tenant_id})


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0002_billing_exclusion"),
        ("accounts", "0002_apitoken_membership"),
    ]

    operations = [
        migrations.RunPython(copy_memberships, copy_back),
        migrations.DeleteModel(name="TenantMembership"),
    ]
