"""Who is working: live worker processes, the steps each holds with the lease left, the
ones that died without stopping (and what they still hold), and the recently stopped
ones. Shared by the console's workers page and ``manage.py workers``."""

import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings

from runs.engine.service import LIVENESS_PG as PG
from runs.engine.service import LIVENESS_PID as PID
from runs.engine.service import db_now, dead_workers
from runs.models import Step, WorkerProcess
from runs.states import StepStatus

#: Stopped workers listed below the live ones.
RECENTLY_STOPPED = 20
#: A worker without a liveness signal is taken for gone once its heartbeat is this many
#: times older than the silence threshold (a worker that merely stalls for a lease or
#: two stays listed as silent).
GONE_AFTER_SILENCES = 5


@dataclass
class Workforce:
    """``live`` workers (each with ``held_steps``, ``silent`` and ``heartbeat_age``
    in seconds set), ``dead`` ones (not stopped, but their liveness signal says the
    process is gone or their heartbeat stopped long ago; the same attributes plus
    ``dead_reason``), ``stopped`` ones (newest first) and the database time ``now``."""

    now: datetime
    live: list[WorkerProcess] = field(default_factory=list)
    dead: list[WorkerProcess] = field(default_factory=list)
    stopped: list[WorkerProcess] = field(default_factory=list)


def workforce(now: datetime | None = None) -> Workforce:
    """The workers and what they hold, measured against the database clock. A worker
    whose heartbeat is older than the lease (at least 10 s) is flagged ``silent``. A
    worker that never recorded its stop is listed as dead when its liveness signal says
    so (``runs.engine.execution.liveness.dead_workers``), or when it has no signal and
    its heartbeat is ``GONE_AFTER_SILENCES`` silences old."""
    now = now or db_now()
    unstopped = list(
        WorkerProcess.objects.filter(stopped_at__isnull=True).order_by("-heartbeat_at", "-pk")
    )
    held: dict[str, list[Step]] = {}
    for step in (
        Step.objects.filter(status=StepStatus.RUNNING, owner__in=[w.worker_id for w in unstopped])
        .select_related("run")
        .order_by("lease_until", "pk")
    ):
        held.setdefault(step.owner, []).append(step)
    silent_after = timedelta(seconds=max(10, settings.AGENTOPS_LEASE_SECONDS))
    signalled_dead = dead_workers(unstopped)
    host = socket.gethostname()
    live: list[WorkerProcess] = []
    dead: list[WorkerProcess] = []
    for worker in unstopped:
        worker.held_steps = held.get(worker.worker_id, [])
        worker.silent = now - worker.heartbeat_at > silent_after
        worker.heartbeat_age = (now - worker.heartbeat_at).total_seconds()
        worker.dead_reason = signalled_dead.get(worker.pk, "")
        # The heartbeat decides only where no signal can tell (a hung worker whose
        # signal says alive stays listed, as silent).
        judged = worker.liveness == PG or (worker.liveness == PID and worker.host == host)
        if not worker.dead_reason and not judged:
            if now - worker.heartbeat_at > silent_after * GONE_AFTER_SILENCES:
                worker.dead_reason = "no heartbeat for a long time"
        (dead if worker.dead_reason else live).append(worker)
    stopped = list(
        WorkerProcess.objects.filter(stopped_at__isnull=False).order_by("-stopped_at", "-pk")[
            :RECENTLY_STOPPED
        ]
    )
    return Workforce(now=now, live=live, dead=dead, stopped=stopped)
