from django.contrib import admin

from .models import Contract, ContractMetric, ContractPrice


class ContractPriceInline(admin.TabularInline):
    model = ContractPrice
    extra = 1


class ContractMetricInline(admin.TabularInline):
    model = ContractMetric
    extra = 0


@admin.register(Contract)
class ContractAdmin(admin.ModelAdmin):
    list_display = ["code", "tenant", "package", "currency", "period", "status", "starts_at", "base_fee"]
    list_filter = ["status", "currency", "package"]
    search_fields = ["code", "tenant__code"]
    inlines = [ContractPriceInline, ContractMetricInline]
