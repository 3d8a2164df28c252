"""Who is working: live worker processes, the steps each holds with the lease left, and
the recently stopped ones. Shared by the console's workers page and ``manage.py workers``."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings

from runs.engine.state.clock import db_now
from runs.models import Step, WorkerProcess
from runs.states import StepStatus

#: Stopped workers listed below the live ones.
RECENTLY_STOPPED = 20


@dataclass
class Workforce:
    """``live`` workers (each with ``held_steps``, ``silent`` and ``heartbeat_age``
    in seconds set), ``stopped`` ones (newest first) and the database time ``now``."""

    now: datetime
    live: list[WorkerProcess] = field(default_factory=list)
    stopped: list[WorkerProcess] = field(default_factory=list)


def workforce(now: datetime | None = None) -> Workforce:
    """The workers and what they hold, measured against the database clock. A live worker
    whose heartbeat is older than the lease (at least 10 s) is flagged ``silent``."""
    now = now or db_now()
    live = list(
        WorkerProcess.objects.filter(stopped_at__isnull=True).order_by("-heartbeat_at", "-pk")
    )
    held: dict[str, list[Step]] = {}
    for step in (
        Step.objects.filter(status=StepStatus.RUNNING, owner__in=[w.worker_id for w in live])
        .select_related("run")
        .order_by("lease_until", "pk")
    ):
        held.setdefault(step.owner, []).append(step)
    silent_after = timedelta(seconds=max(10, settings.AGENTOPS_LEASE_SECONDS))
    for worker in live:
        worker.held_steps = held.get(worker.worker_id, [])
        worker.silent = now - worker.heartbeat_at > silent_after
        worker.heartbeat_age = (now - worker.heartbeat_at).total_seconds()
    stopped = list(
        WorkerProcess.objects.filter(stopped_at__isnull=False).order_by("-stopped_at", "-pk")[
            :RECENTLY_STOPPED
        ]
    )
    return Workforce(now=now, live=live, stopped=stopped)
