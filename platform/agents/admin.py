from django.contrib import admin

from .models import Agent, AgentBinding, AgentKey


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
