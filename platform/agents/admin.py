from django.contrib import admin
from django.http import HttpRequest

from .models import Agent, AgentBinding, AgentKey, ManifestRefusal, ModelPublisherKey


class AgentKeyInline(admin.TabularInline):
    model = AgentKey
    extra = 0
    readonly_fields = ["key_id", "created_at"]


class AgentBindingInline(admin.TabularInline):
    model = AgentBinding
    extra = 0


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["agent_id", "kind", "name", "host_class", "active", "created_at"]
    list_filter = ["kind", "active"]
    search_fields = ["agent_id", "name"]
    inlines = [AgentKeyInline, AgentBindingInline]


@admin.register(AgentKey)
class AgentKeyAdmin(admin.ModelAdmin):
    list_display = ["key_id", "agent", "created_at", "revoked_at"]
    search_fields = ["key_id", "agent__agent_id"]


@admin.register(ModelPublisherKey)
class ModelPublisherKeyAdmin(admin.ModelAdmin):
    """Revoking a key (set revoked at): agents refuse manifests it signed from their next snapshot."""

    list_display = ["model_id", "key_id", "created_at", "revoked_at"]
    search_fields = ["model_id", "key_id"]
    readonly_fields = ["key_id", "created_at"]


@admin.register(ManifestRefusal)
class ManifestRefusalAdmin(admin.ModelAdmin):
    list_display = ["refused_at", "agent", "model_id", "reason", "key_id"]
    list_filter = ["reason"]
    search_fields = ["agent__agent_id", "model_id", "key_id", "manifest_sha3"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # agents report refusals; staff read them

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
