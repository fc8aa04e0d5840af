from django.contrib import admin

from .models import (
    AlertEvent,
    CreditStep,
    CustomerDependency,
    DependencyCheck,
    Exclusion,
    ExclusionAppeal,
    Objective,
    ServiceCredit,
    SlaAlert,
    SlaPolicy,
    SlaReport,
)


class CreditStepInline(admin.TabularInline):
    model = CreditStep
    extra = 0


class ObjectiveInline(admin.StackedInline):
    model = Objective
    extra = 0
    show_change_link = True


@admin.register(SlaPolicy)
class SlaPolicyAdmin(admin.ModelAdmin):
    list_display = ["name", "package", "contract", "time_zone"]
    inlines = [ObjectiveInline]


@admin.register(Objective)
class ObjectiveAdmin(admin.ModelAdmin):
    list_display = ["name", "policy", "kind", "layer", "threshold_ms", "target_percent", "timeslice_minutes"]
    inlines = [CreditStepInline]


@admin.register(Exclusion)
class ExclusionAdmin(admin.ModelAdmin):
    list_display = ["contract", "kind", "scope", "starts_at", "ends_at", "declared_by", "detected_by"]
    list_filter = ["kind", "closed"]

    def save_model(self, request, obj, form, change):
        if not change:
            obj.declared_by = request.user
        super().save_model(request, obj, form, change)

    def get_exclude(self, request, obj=None):
        return ["declared_by", "detected_by", "closed"]


class DependencyCheckInline(admin.TabularInline):
    model = DependencyCheck
    extra = 0
    ordering = ["-checked_at"]
    readonly_fields = ["checked_at", "healthy", "status_code", "error", "duration_ms"]
    can_delete = False
    max_num = 0


@admin.register(CustomerDependency)
class CustomerDependencyAdmin(admin.ModelAdmin):
    """What the dependency watch probes (sla.dependencies); its latest checks below."""

    list_display = ["contract", "name", "health_url", "created_at"]
    inlines = [DependencyCheckInline]


@admin.register(ExclusionAppeal)
class ExclusionAppealAdmin(admin.ModelAdmin):
    """Customers' appeals of exclusions: staff read the evidence and set the status."""

    list_display = ["exclusion", "status", "opened_by", "opened_at"]
    list_filter = ["status"]
    readonly_fields = ["exclusion", "reason", "evidence", "opened_by", "opened_at"]


@admin.register(SlaReport)
class SlaReportAdmin(admin.ModelAdmin):
    list_display = ["contract", "month", "status", "valid_count", "credit_percent", "computed_at"]
    list_filter = ["status"]

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ServiceCredit)
class ServiceCreditAdmin(admin.ModelAdmin):
    list_display = ["contract", "month", "credit_percent", "amount", "currency", "status", "invoice"]


class AlertEventInline(admin.TabularInline):
    model = AlertEvent
    extra = 0
    readonly_fields = ["kind", "at", "payload"]


@admin.register(SlaAlert)
class SlaAlertAdmin(admin.ModelAdmin):
    list_display = ["contract", "kind", "rule", "subject", "severity", "fired_at", "resolved_at"]
    list_filter = ["kind", "severity", "rule"]
    inlines = [AlertEventInline]
