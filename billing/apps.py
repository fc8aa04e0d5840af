from django.apps import AppConfig
from django.db.models.signals import post_save

from contracts.versions import add_price_version_guard


class BillingConfig(AppConfig):
    name = "billing"

    def ready(self) -> None:
        # Models and tasks load once the registry is ready (Django's rule for AppConfig.ready).
        from . import quotas  # noqa: F401  (registers the quota watch's task)
        from .events import invoices_finalised, note_issued
        from .models import Invoice
        from .price_versions import refuse_invoiced_periods
        from .signals import checkpoint_on_invoice
        from .stripe_sync import push_finalised_invoices, push_issued_note

        post_save.connect(checkpoint_on_invoice, sender=Invoice, dispatch_uid="ledger-checkpoint-on-invoice")
        add_price_version_guard(refuse_invoiced_periods)
        invoices_finalised.connect(push_finalised_invoices, dispatch_uid="billing-push-invoices")
        note_issued.connect(push_issued_note, dispatch_uid="billing-push-notes")
