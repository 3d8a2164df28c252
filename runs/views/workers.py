"""The workers page: worker processes (``WorkerProcess``) and the steps each holds."""

from datetime import timedelta

from django.conf import settings

from runs.console.access import console_view, render_page
from runs.console.charts import workers_chart
from runs.engine.state.clock import db_now
from runs.models import Step, WorkerProcess
from runs.states import StepStatus

#: Stopped workers listed below the live ones.
RECENTLY_STOPPED = 20


@console_view
def workers(request):
    """Live workers (not stopped) with heartbeat age and held steps; recently stopped ones."""
    now = db_now()
    live = list(WorkerProcess.objects.filter(stopped_at__isnull=True).order_by("-heartbeat_at"))
    held: dict[str, list[Step]] = {}
    for step in (
        Step.objects.filter(status=StepStatus.RUNNING, owner__in=[w.worker_id for w in live])
        .select_related("run")
        .order_by("lease_until")
    ):
        held.setdefault(step.owner, []).append(step)
    silent_after = timedelta(seconds=max(10, settings.AGENTOPS_LEASE_SECONDS))
    for worker in live:
        worker.held_steps = held.get(worker.worker_id, [])
        worker.silent = now - worker.heartbeat_at > silent_after
        worker.heartbeat_age = (now - worker.heartbeat_at).total_seconds()
    stopped = list(
        WorkerProcess.objects.filter(stopped_at__isnull=False).order_by("-stopped_at")[
            :RECENTLY_STOPPED
        ]
    )
    context = {"live": live, "stopped": stopped, "now": now}
    if not request.htmx:
        context["chart"] = workers_chart(now)
    return render_page(request, "console/workers.html", "partials/worker_rows.html", context)
