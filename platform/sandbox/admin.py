from django.contrib import admin

from .models import Sandbox


@admin.register(Sandbox)
class SandboxAdmin(admin.ModelAdmin):
    list_display = ["tenant", "contract", "daily_events", "events_sent", "simulated_until", "reset_at"]
    readonly_fields = ["events_sent", "reset_at", "created_at"]
