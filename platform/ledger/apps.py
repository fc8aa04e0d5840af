from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"

    def ready(self) -> None:
        from . import signals  # noqa: F401 - connects the invoice hook
