from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from .models import WebhookDelivery, WebhookDeliveryAttempt, WebhookEndpoint, WebhookEvent


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ["url", "tenant", "event_types", "active", "created_at"]
    list_filter = ["active"]

    def save_model(self, request: HttpRequest, obj: WebhookEndpoint, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not change:  # the secret is shown once, at creation
            messages.warning(
                request, f"Signing secret for {obj.url}: {obj.secret} (it will not be shown again)"
            )


class WebhookDeliveryInline(admin.TabularInline):
    model = WebhookDelivery
    extra = 0
    fields = readonly_fields = ("endpoint", "status", "next_retry_at", "created_at")
    show_change_link = True
    can_delete = False


@admin.register(WebhookEvent)
class WebhookEventAdmin(admin.ModelAdmin):
    list_display = ["event_id", "type", "tenant", "created_at"]
    list_filter = ["type"]
    search_fields = ["event_id"]
    readonly_fields = ["event_id", "type", "tenant", "payload", "created_at"]
    inlines = [WebhookDeliveryInline]


class WebhookDeliveryAttemptInline(admin.TabularInline):
    model = WebhookDeliveryAttempt
    extra = 0
    fields = readonly_fields = (
        "number",
        "attempted_at",
        "status_code",
        "duration_ms",
        "error",
        "response_snippet",
        "next_retry_at",
    )
    can_delete = False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["event", "endpoint", "status", "next_retry_at", "created_at"]
    list_filter = ["status"]
    readonly_fields = ["event", "endpoint", "status", "next_retry_at", "created_at"]
    inlines = [WebhookDeliveryAttemptInline]
