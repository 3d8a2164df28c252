"""Django admin for inspection. Status fields are read-only here: every status change
goes through the engine's state machine (runs.engine.gateway), never a raw edit."""

from django.contrib import admin

from runs.models import (
    Artifact,
    Checkpoint,
    Event,
    MaintenanceLease,
    Message,
    Operation,
    Run,
    Step,
    Thread,
    WorkerProcess,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Append-only or engine-owned records: viewable, never edited or deleted by hand."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class StepInline(admin.TabularInline):
    model = Step
    fields = ("seq", "name", "generation", "status", "attempt", "owner", "lease_until", "error_code")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Thread)
class ThreadAdmin(admin.ModelAdmin):
    list_display = ("thread_id", "owner", "policy", "message_seq", "created_at")
    list_filter = ("policy",)
    search_fields = ("thread_id",)
    readonly_fields = ("message_seq", "created_at")


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "workflow", "workflow_version", "status", "thread", "owner",
                    "generation", "created_at", "finished_at")
    list_filter = ("status", "workflow", "workflow_version")
    search_fields = ("id", "thread__thread_id", "goal", "request_id")
    date_hierarchy = "created_at"
    inlines = [StepInline]
    list_select_related = ("thread", "owner")


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "seq", "name", "generation", "status", "attempt", "owner",
                    "lease_until", "error_code")
    list_filter = ("status", "name")
    search_fields = ("run__id", "run__thread__thread_id", "name")
    list_select_related = ("run",)


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("message_id", "thread", "seq", "role", "status", "run", "created_at")
    list_filter = ("role", "status")
    search_fields = ("message_id", "thread__thread_id", "run__id")
    list_select_related = ("thread", "run")


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ("name", "kind", "run", "step", "size", "checksum", "created_at")
    list_filter = ("kind",)
    search_fields = ("name", "run__id", "run__thread__thread_id", "checksum")
    list_select_related = ("run", "step")


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "type", "actor", "step", "created_at")
    list_filter = ("type",)
    search_fields = ("run__id", "run__thread__thread_id", "type", "actor")
    list_select_related = ("run", "step")


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ("run", "name", "generation", "version", "created_at")
    search_fields = ("run__id", "run__thread__thread_id", "name")
    list_select_related = ("run",)


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = ("idempotency_key", "tool", "side_effect", "status", "attempt", "run", "updated_at")
    list_filter = ("status", "tool", "side_effect")
    search_fields = ("idempotency_key", "run__id", "run__thread__thread_id", "external_ref")
    list_select_related = ("run",)


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    list_display = ("worker_id", "host", "pid", "mode", "queues", "heartbeat_at", "stopped_at")
    list_filter = ("mode",)
    search_fields = ("worker_id", "host")


@admin.register(MaintenanceLease)
class MaintenanceLeaseAdmin(ReadOnlyAdmin):
    list_display = ("name", "owner", "lease_until")
