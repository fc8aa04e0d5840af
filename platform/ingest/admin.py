from django.contrib import admin

from .models import IngestBatch, RejectedRecord, SequenceGap, SequenceRange


@admin.register(IngestBatch)
class IngestBatchAdmin(admin.ModelAdmin):
    list_display = [
        "agent",
        "first_seq",
        "last_seq",
        "accepted",
        "duplicate",
        "rejected",
        "status_code",
        "received_at",
    ]
    list_filter = ["status_code"]
    readonly_fields = [f.name for f in IngestBatch._meta.fields]


@admin.register(SequenceRange)
class SequenceRangeAdmin(admin.ModelAdmin):
    list_display = ["agent", "first_seq", "last_seq"]


@admin.register(SequenceGap)
class SequenceGapAdmin(admin.ModelAdmin):
    list_display = ["agent", "first_missing", "last_missing", "detected_at", "closed_at"]
    list_filter = ["closed_at"]


@admin.register(RejectedRecord)
class RejectedRecordAdmin(admin.ModelAdmin):
    list_display = ["agent", "seq", "record_id", "code", "field"]
    list_filter = ["code"]
