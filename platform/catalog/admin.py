from django.contrib import admin

from .models import ComputePackage


@admin.register(ComputePackage)
class ComputePackageAdmin(admin.ModelAdmin):
    list_display = ["code", "name", "unit", "active"]
    search_fields = ["code", "name"]
