from django.apps import AppConfig


class PackageFactoryConfig(AppConfig):
    name = "package_factory"
    verbose_name = "Package factory"
    default_auto_field = "django.db.models.BigAutoField"
