from django.apps import AppConfig


class ReleasesConfig(AppConfig):
    name = "releases"
    verbose_name = "Capability gray releases"
    default_auto_field = "django.db.models.BigAutoField"
