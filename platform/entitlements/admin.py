from django.contrib import admin
from django.http import HttpRequest

from .models import ApiKey, QuotaLease, QuotaPeriod


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "tenant", "contract", "sla_class", "quota_tokens", "created_at", "revoked_at"]
    search_fields = ["prefix", "tenant__code", "contract__code"]
    readonly_fields = ["prefix", "key_hash", "created_at"]


@admin.register(QuotaPeriod)
class QuotaPeriodAdmin(admin.ModelAdmin):
    """Read-only: grants and settlements happen only through the agents' signed lease calls."""

    list_display = ["api_key", "period", "settled_tokens", "outstanding_tokens", "exhausted_at"]
    search_fields = ["api_key__prefix", "api_key__contract__code"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(QuotaLease)
class QuotaLeaseAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "quota_period",
        "agent",
        "granted_tokens",
        "spent_tokens",
        "expires_at",
        "settled_at",
    ]
    list_filter = ["settled_at"]
    search_fields = ["quota_period__api_key__prefix", "agent__agent_id"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
