from django.contrib import admin

from .models import ComputePackage, HostCostProfile


@admin.register(ComputePackage)
class ComputePackageAdmin(admin.ModelAdmin):
    list_display = ["code", "name", "unit", "margin_factor", "active"]
    search_fields = ["code", "name"]


@admin.register(HostCostProfile)
class HostCostProfileAdmin(admin.ModelAdmin):
    list_display = [
        "host_class",
        "currency",
        "depreciation_per_hour",
        "power_per_hour",
        "operations_per_hour",
    ]
