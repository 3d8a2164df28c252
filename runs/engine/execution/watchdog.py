"""The watchdog: flags runs that are RUNNING or WAITING_EXTERNAL but
made no progress (no new event) for ``AGENTOPS_STUCK_SECONDS``. The flag is
``Run.stuck_since`` plus a ``run.stuck`` event; the next progress event clears it
(``runs.engine.state.gateway.RunTx.flush``). The console lists flagged runs with ``stuck_runs``.
"""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Now

from runs.engine.state.gateway import run_transaction
from runs.models import Run, Step
from runs.states import RunStatus, StepStatus

#: Statuses in which silence means something is wrong (waiting for people is not stuck).
WATCHED = (RunStatus.RUNNING, RunStatus.WAITING_EXTERNAL)


def silent_by_design(now: Any) -> Q:
    """Runs whose silence is expected at ``now`` (a datetime or ``Now()``): asleep on a
    durable timer that has not rung, waiting for a signal whose deadline (if any) is
    still ahead, or waiting for their child runs (those are watched themselves). The one
    rule of the watchdog, the console's "stuck" filter and ``/metrics``; a wait whose
    deadline passed is not silent by design (its timeout should have fired)."""
    # Subqueries, not joins: an Exists is never NULL, so the rule negates cleanly
    # (a run without a current step, or a step without a deadline, stays countable).
    quiet_step = Step.objects.filter(pk=OuterRef("current_step")).filter(
        Q(status=StepStatus.PENDING, not_before__gt=now)
        | (
            Q(status=StepStatus.WAITING)
            & ~Q(signal_name="")
            & (Q(wait_until__isnull=True) | Q(wait_until__gt=now))
        )
    )
    waiting_children = Run.objects.filter(
        parent_step=OuterRef("current_step"),
        parent_step__status=StepStatus.WAITING,
        detached=False,
    )
    return Q(Exists(quiet_step)) | Q(Exists(waiting_children))


def flag_stuck_runs(actor: str, batch: int) -> int:
    """Sweeper task: flag up to ``batch`` silent runs; returns how many were flagged."""
    threshold = settings.AGENTOPS_STUCK_SECONDS
    cutoff = Now() - timedelta(seconds=threshold)
    ids = list(
        Run.objects.filter(status__in=WATCHED, stuck_since__isnull=True, last_event_at__lt=cutoff)
        .exclude(silent_by_design(Now()))
        .order_by("last_event_at")
        .values_list("pk", flat=True)[:batch]
    )
    flagged = 0
    for run_id in ids:
        with run_transaction(run_id) as tx:
            moved = Run.objects.filter(
                pk=run_id, status__in=WATCHED, stuck_since__isnull=True, last_event_at__lt=cutoff
            ).update(stuck_since=Now())
            if moved:
                tx.event(
                    "run.stuck",
                    {
                        "status": tx.run.status,
                        "threshold_s": threshold,
                        "step": tx.run.current_step.name if tx.run.current_step else None,
                        "reason": f"no event for more than {threshold}s",
                    },
                    actor=actor,
                    progress=False,
                )
                flagged += 1
    return flagged


def stuck_runs() -> QuerySet:
    """Runs currently flagged stuck, longest stuck first."""
    return Run.objects.filter(stuck_since__isnull=False).order_by("stuck_since")
