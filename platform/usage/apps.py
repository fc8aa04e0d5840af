from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save

from ingest.events import records_stored


class UsageConfig(AppConfig):
    name = "usage"
    verbose_name = "Usage time series and breakdowns"

    def ready(self) -> None:
        from contracts.models import Contract
        from sla.models import Objective, SlaPolicy

        from .cache import records_stored_receiver, retire_terms_answers

        records_stored.connect(records_stored_receiver, dispatch_uid="usage-data-versions")

        for model in (Contract, SlaPolicy, Objective):
            for signal in (post_save, post_delete):
                signal.connect(
                    retire_terms_answers, sender=model, dispatch_uid=f"usage-terms-{model.__name__}"
                )
