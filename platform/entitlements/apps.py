from django.apps import AppConfig


class EntitlementsConfig(AppConfig):
    name = "entitlements"
    verbose_name = "Customer API keys and entitlements"
