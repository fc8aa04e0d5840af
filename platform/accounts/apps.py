from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Tenants and users"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save, pre_delete

        from . import token_cache
        from .models import ApiToken, Tenant

        # A kept token must never outlive a change to what it authorises (accounts.token_cache).
        for signal in (post_save, post_delete):
            signal.connect(token_cache.forget_token, sender=ApiToken, dispatch_uid=f"token-{signal}")
        post_save.connect(token_cache.forget_tenant_tokens, sender=Tenant, dispatch_uid="token-tenant-save")
        pre_delete.connect(token_cache.forget_tenant_tokens, sender=Tenant, dispatch_uid="token-tenant-del")
        user = get_user_model()
        post_save.connect(token_cache.forget_user_tokens, sender=user, dispatch_uid="token-user-save")
        pre_delete.connect(token_cache.forget_user_tokens, sender=user, dispatch_uid="token-user-del")
