from django.contrib import admin

from .models import ComputePackage, HostCostProfile, PackagePlan, PlanPrice


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
