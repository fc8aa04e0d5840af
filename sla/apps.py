from django.apps import AppConfig

from billing.adjustments import register_sources


class SlaConfig(AppConfig):
    name = "sla"
    verbose_name = "SLA contracts"

    def ready(self) -> None:
        # Models load once the registry is ready (Django's rule for AppConfig.ready); the sources query them.
        from .billing_sources import SlaBillingPauses, SlaServiceCredits

        register_sources(pauses=SlaBillingPauses(), credits=SlaServiceCredits())
