"""Django admin for the runs app.

Status columns are read-only everywhere: the admin never edits a status directly (that
would skip the state machine and its events). The only admin actions call the same
engine functions as the console, with the actor ``user:<username>``. Events and
operations are read-only history.
"""

from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html

from runs.engine.service import (
    ControlError,
    redispatch,
    request_cancel,
    set_schedule_paused,
    timing_of,
    trigger_schedule,
)
from runs.models import (
    Artifact,
    Checkpoint,
    Event,
    MaintenanceLease,
    Message,
    Operation,
    RateLimit,
    Run,
    Schedule,
    ScheduleTick,
    Signal,
    Step,
    Summary,
    Thread,
    WorkerProcess,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """History that nobody edits from the admin: view only."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class StepInline(ReadOnlyInline):
    model = Step
    fields = (
        "seq",
        "name",
        "generation",
        "status",
        "attempt",
        "owner",
        "lease_until",
        "error_code",
        "started_at",
        "finished_at",
    )
    readonly_fields = fields


class OperationInline(ReadOnlyInline):
    model = Operation
    fields = ("tool", "side_effect", "status", "idempotency_key", "attempt", "updated_at")
    readonly_fields = fields


def _actor(request) -> str:
    return f"user:{request.user.get_username()}"


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "workflow",
        "workflow_version",
        "status",
        "thread",
        "owner",
        "generation",
        "created_at",
        "updated_at",
        "stuck_since",
    )
    list_filter = ("status", "workflow", "workflow_version", "created_at")
    search_fields = ("=id", "thread__thread_id", "goal", "request_id")
    list_select_related = ("thread", "owner")
    date_hierarchy = "created_at"
    inlines = [StepInline, OperationInline]
    readonly_fields = ("events_link", "console_link")
    actions = ["request_cancel_action", "redispatch_action"]

    @admin.display(description="Events")
    def events_link(self, obj):
        url = reverse("admin:runs_event_changelist") + f"?run__id__exact={obj.pk}"
        return format_html('<a href="{}">{} events</a>', url, obj.event_seq)

    @admin.display(description="Console")
    def console_link(self, obj):
        return format_html(
            '<a href="{}">open in the console</a>', reverse("console:run", args=[obj.pk])
        )

    def has_operate_permission(self, request):
        return request.user.has_perm("runs.operate_run")

    @admin.action(description="Request cancel (engine request_cancel)", permissions=["operate"])
    def request_cancel_action(self, request, queryset):
        self._each(
            request,
            queryset,
            lambda run: request_cancel(
                run, actor=_actor(request), reason="cancelled from the Django admin"
            ),
            "cancel requested",
        )

    @admin.action(description="Re-dispatch the open step (engine resume)", permissions=["operate"])
    def redispatch_action(self, request, queryset):
        self._each(
            request,
            queryset,
            lambda run: redispatch(run, actor=_actor(request), wait_seconds=0),
            "re-dispatched",
        )

    def _each(self, request, queryset, call, verb: str) -> None:
        done, refused = 0, []
        for run in queryset:
            try:
                call(run)
                done += 1
            except ControlError as exc:
                refused.append(f"{run.pk}: {exc.message}")
        self.message_user(request, f"{done} run(s) {verb}.", messages.SUCCESS)
        if refused:
            self.message_user(request, "Skipped: " + "; ".join(refused[:20]), messages.WARNING)


@admin.register(Thread)
class ThreadAdmin(ReadOnlyAdmin):
    list_display = ("thread_id", "owner", "policy", "message_seq", "created_at")
    search_fields = ("thread_id",)
    list_filter = ("policy",)


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = (
        "run",
        "seq",
        "name",
        "generation",
        "status",
        "attempt",
        "owner",
        "lease_until",
        "error_code",
    )
    list_filter = ("status", "name", "error_code")
    search_fields = ("=run__id", "run__thread__thread_id", "name")
    list_select_related = ("run",)


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("message_id", "thread", "run", "seq", "role", "status", "tool_call_id")
    list_filter = ("role", "status")
    search_fields = ("=run__id", "thread__thread_id", "message_id", "tool_call_id")
    list_select_related = ("thread", "run")


@admin.register(Summary)
class SummaryAdmin(ReadOnlyAdmin):
    list_display = (
        "thread",
        "first_seq",
        "last_seq",
        "tokens",
        "covered_tokens",
        "run",
        "created_at",
    )
    search_fields = ("thread__thread_id", "run__id")
    list_select_related = ("thread", "run")


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ("name", "kind", "run", "step", "size", "checksum", "created_at")
    list_filter = ("kind",)
    search_fields = ("=run__id", "run__thread__thread_id", "name", "checksum")
    list_select_related = ("run", "step")


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "type", "step", "actor", "created_at")
    list_filter = ("type", "created_at")
    search_fields = ("=run__id", "run__thread__thread_id", "actor", "type")
    list_select_related = ("run", "step")


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ("run", "name", "generation", "version", "created_at")
    search_fields = ("=run__id", "run__thread__thread_id", "name")
    list_select_related = ("run",)


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = (
        "idempotency_key",
        "tool",
        "side_effect",
        "status",
        "run",
        "step",
        "attempt",
        "updated_at",
    )
    list_filter = ("status", "side_effect", "tool")
    search_fields = ("=run__id", "run__thread__thread_id", "idempotency_key", "external_ref")
    list_select_related = ("run", "step")


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    list_display = (
        "worker_id",
        "host",
        "pid",
        "mode",
        "queues",
        "started_at",
        "heartbeat_at",
        "stopped_at",
    )
    list_filter = ("mode",)
    search_fields = ("worker_id", "host")


@admin.register(MaintenanceLease)
class MaintenanceLeaseAdmin(ReadOnlyAdmin):
    list_display = ("name", "owner", "lease_until")


class ScheduleTickInline(ReadOnlyInline):
    model = ScheduleTick
    fields = ("tick_at", "outcome", "manual", "run", "detail", "created_at")
    readonly_fields = fields
    ordering = ("-tick_at",)
    max_num = 20


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    """Schedules are created by ``manage.py schedules add`` (or the API), which checks
    the cron, the zone and the input; here they are seen, paused, resumed, triggered and
    deleted."""

    list_display = ("name", "workflow", "timing", "overlap", "catchup", "paused", "next_fire_at")
    list_filter = ("paused", "workflow")
    search_fields = ("name", "workflow")
    readonly_fields = (
        "name",
        "workflow",
        "input",
        "cron",
        "timezone",
        "every_seconds",
        "overlap",
        "catchup",
        "catchup_window",
        "paused",
        "next_fire_at",
        "created_at",
    )
    inlines = [ScheduleTickInline]
    actions = ["pause", "resume", "trigger"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return request.user.has_perm("runs.operate_run")

    @admin.display(description="when")
    def timing(self, obj: Schedule) -> str:
        return timing_of(obj).describe()

    @admin.action(description="Pause the selected schedules")
    def pause(self, request, queryset):
        for schedule in queryset:
            set_schedule_paused(schedule.name, True)
        self.message_user(request, f"{queryset.count()} paused.")

    @admin.action(description="Resume the selected schedules (from now)")
    def resume(self, request, queryset):
        for schedule in queryset:
            set_schedule_paused(schedule.name, False)
        self.message_user(request, f"{queryset.count()} resumed.")

    @admin.action(description="Trigger the selected schedules now")
    def trigger(self, request, queryset):
        for schedule in queryset:
            tick = trigger_schedule(schedule.name, f"user:{request.user.get_username()}")
            level = messages.SUCCESS if tick.run_id else messages.WARNING
            self.message_user(request, f"{schedule.name}: tick {tick.outcome}", level)


@admin.register(Signal)
class SignalAdmin(ReadOnlyAdmin):
    list_display = ("name", "run", "request_id", "actor", "created_at", "step", "consumed_at")
    list_filter = ("name",)
    search_fields = ("=run__id", "name", "request_id")
    list_select_related = ("run", "step")


@admin.register(RateLimit)
class RateLimitAdmin(admin.ModelAdmin):
    """Named rate limits (docs/parallel.md): a row here overrides the limit of its name
    in ``AGENTOPS_RATE_LIMITS`` and applies at the next call on every worker; deleting
    it restores the setting's."""

    list_display = ("name", "requests", "tokens", "window_seconds")
    search_fields = ("name",)
