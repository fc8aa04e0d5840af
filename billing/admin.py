from django.contrib import admin

from .models import Invoice, InvoiceLine


class InvoiceLineInline(admin.TabularInline):
    model = InvoiceLine
    extra = 0
    readonly_fields = ["dimension", "description", "quantity", "unit_price", "amount"]


@admin.register(Invoice)
class InvoiceAdmin(admin.ModelAdmin):
    list_display = ["id", "contract", "tenant", "period_start", "currency", "total", "status", "record_count"]
    list_filter = ["status", "currency"]
    inlines = [InvoiceLineInline]
