from django.contrib import admin

from .models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "tenant", "contract", "sla_class", "quota_tokens", "created_at", "revoked_at"]
    search_fields = ["prefix", "tenant__code", "contract__code"]
    readonly_fields = ["prefix", "key_hash", "created_at"]
