from django.contrib import admin

from .models import Contract, ContractMetric, ContractPackage, ContractPrice, ContractTax


class ContractPackageInline(admin.TabularInline):
    """Further packages the contract holds beside its own; keys may be issued for each."""

    model = ContractPackage
    extra = 0


class ContractPriceInline(admin.TabularInline):
    """One row per price version; `effective_from` empty is the initial one (ContractPrice.clean checks
    a new version's start like the API does)."""

    model = ContractPrice
    extra = 1
    fields = ["dimension", "effective_from", "charge_model", "unit_price", "properties", "included_quantity"]


class ContractMetricInline(admin.TabularInline):
    model = ContractMetric
    extra = 0


class ContractTaxInline(admin.TabularInline):
    """Taxes per line (billing.taxes); with none, the contract's single tax_rate applies."""

    model = ContractTax
    extra = 0


@admin.register(Contract)
class ContractAdmin(admin.ModelAdmin):
    list_display = ["code", "tenant", "package", "currency", "period", "status", "starts_at", "base_fee"]
    list_filter = ["status", "currency", "package"]
    search_fields = ["code", "tenant__code"]
    inlines = [ContractPackageInline, ContractPriceInline, ContractMetricInline, ContractTaxInline]
