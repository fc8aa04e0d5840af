from django.contrib import admin

from .models import GateEvaluation, ReleasePlan, ReleaseStage, StageCapability, StageNote


class StageCapabilityInline(admin.TabularInline):
    model = StageCapability
    extra = 0


class StageNoteInline(admin.TabularInline):
    model = StageNote
    extra = 0
    readonly_fields = ["author", "created_at"]


@admin.register(ReleasePlan)
class ReleasePlanAdmin(admin.ModelAdmin):
    list_display = ["code", "contract", "package", "status", "created_at"]
    list_filter = ["status"]
    search_fields = ["code", "contract__code", "package__code"]


@admin.register(ReleaseStage)
class ReleaseStageAdmin(admin.ModelAdmin):
    list_display = ["plan", "position", "name", "status", "billing_on", "promotion", "holds"]
    list_filter = ["status", "billing_on", "promotion"]
    inlines = [StageCapabilityInline, StageNoteInline]


@admin.register(GateEvaluation)
class GateEvaluationAdmin(admin.ModelAdmin):
    list_display = ["stage", "verdict", "evaluated_at"]
    list_filter = ["verdict"]
    readonly_fields = ["stage", "verdict", "figures", "window_start", "window_end", "evaluated_at"]
