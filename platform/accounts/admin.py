from django.contrib import admin

from .models import ApiToken, Membership, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["code", "name", "created_at"]
    search_fields = ["code", "name"]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__username", "tenant__code"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "tenant", "role", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["role"]
    readonly_fields = ["prefix", "digest", "created_by", "created_at", "last_used_at"]
