from django.apps import AppConfig


class SandboxConfig(AppConfig):
    name = "sandbox"
    verbose_name = "Customer sandboxes"
    default_auto_field = "django.db.models.BigAutoField"
