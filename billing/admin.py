from django.contrib import admin

from .models import (
    Coupon,
    CreditEntry,
    Invoice,
    InvoiceLine,
    Issuer,
    LateUsage,
    Note,
    Outcome,
    StripeCustomer,
    StripeNote,
    StripePayment,
)


@admin.register(Issuer)
class IssuerAdmin(admin.ModelAdmin):
    list_display = ["code", "legal_name", "tax_id"]


class InvoiceLineInline(admin.TabularInline):
    model = InvoiceLine
    extra = 0
    readonly_fields = ["kind", "dimension", "description", "quantity", "unit_price", "amount", "details"]


class NoteInline(admin.TabularInline):
    model = Note
    extra = 0
    readonly_fields = ["kind", "number", "reason", "amount", "line"]


@admin.register(Invoice)
class InvoiceAdmin(admin.ModelAdmin):
    list_display = [
        "number",
        "contract",
        "tenant",
        "period_start",
        "currency",
        "total",
        "amount_due",
        "status",
    ]
    list_filter = ["status", "currency", "issuing_entity"]
    search_fields = ["number", "contract__code", "tenant__code"]
    inlines = [InvoiceLineInline, NoteInline]


@admin.register(CreditEntry)
class CreditEntryAdmin(admin.ModelAdmin):
    list_display = ["contract", "kind", "amount", "invoice", "reference", "created_at"]

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False  # append-only

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Coupon)
class CouponAdmin(admin.ModelAdmin):
    list_display = ["contract", "code", "percent_off", "amount_off", "periods"]


@admin.register(Outcome)
class OutcomeAdmin(admin.ModelAdmin):
    list_display = ["contract", "ref", "kind", "value", "status", "decided_by", "window_ends_at", "billed_on"]
    list_filter = ["status", "decided_by"]


@admin.register(LateUsage)
class LateUsageAdmin(admin.ModelAdmin):
    list_display = ["invoice", "dimension", "quantity", "amount", "decision", "billed_on", "detected_at"]


@admin.register(StripePayment)
class StripePaymentAdmin(admin.ModelAdmin):
    list_display = [
        "invoice",
        "payment_intent_id",
        "amount",
        "status",
        "attempts",
        "last_error",
        "updated_at",
    ]
    list_filter = ["status"]


@admin.register(StripeNote)
class StripeNoteAdmin(admin.ModelAdmin):
    """Credit and debit notes sent to Stripe; filter on `failed` to see the ones that need a hand."""

    list_display = ["note", "action", "amount", "stripe_id", "status", "attempts", "last_error", "updated_at"]
    list_filter = ["status", "action"]
    search_fields = ["note__number", "stripe_id"]
    readonly_fields = ["created_at", "updated_at"]


admin.site.register(StripeCustomer)
