from django.contrib import admin
from django.http import HttpRequest

from .models import ComputePackage, HostCostProfile, ModelPrice, PackagePlan, PlanPrice


class PackagePlanInline(admin.TabularInline):
    model = PackagePlan
    extra = 0
    fields = ["code", "name", "currency", "base_fee", "payment", "active"]
    show_change_link = True


@admin.register(ComputePackage)
class ComputePackageAdmin(admin.ModelAdmin):
    list_display = ["code", "name", "unit", "margin_factor", "active"]
    search_fields = ["code", "name"]
    inlines = [PackagePlanInline]


class PlanPriceInline(admin.TabularInline):
    model = PlanPrice
    extra = 1


@admin.register(PackagePlan)
class PackagePlanAdmin(admin.ModelAdmin):
    list_display = ["package", "code", "name", "currency", "period", "base_fee", "payment", "active"]
    list_filter = ["payment", "currency", "active", "package"]
    search_fields = ["code", "name", "package__code"]
    inlines = [PlanPriceInline]


@admin.register(HostCostProfile)
class HostCostProfileAdmin(admin.ModelAdmin):
    list_display = [
        "host_class",
        "currency",
        "depreciation_per_hour",
        "power_per_hour",
        "operations_per_hour",
    ]


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    """Read only: a stored version may have priced an invoice; a new price is a new version (import)."""

    list_display = ["model_id", "currency", "effective_from", "input_per_token", "output_per_token"]
    list_filter = ["currency", "effective_from"]
    search_fields = ["model_id"]

    def has_change_permission(self, request: HttpRequest, obj: ModelPrice | None = None) -> bool:
        return False
