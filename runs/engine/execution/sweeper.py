"""The sweeper: recovers what notifications and dead workers lost.

Each task is a bounded batch of conditional UPDATEs, so two sweepers running at once
(startup recovery while the periodic sweeper runs) do no harm; a maintenance lease keeps
the periodic one to one process at a time anyway.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, Q
from django.db.models.functions import Now

from runs.engine.execution import dispatch
from runs.engine.state import concurrency, leases
from runs.engine.state.clock import db_now, now_plus_sql, now_sql, seconds_param
from runs.engine.state.gateway import run_transaction
from runs.models import MaintenanceLease, Step
from runs.states import RUN_EXECUTABLE, StepStatus

logger = logging.getLogger("agentops.sweeper")


@dataclass
class SweepReport:
    """Counts of what one sweep did, by task name."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, task: str, n: int) -> None:
        self.counts[task] = self.counts.get(task, 0) + n

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def reclaim_expired_leases(actor: str, batch: int) -> int:
    """RUNNING steps whose lease passed: back to PENDING (fenced on the attempt seen), a
    ``lease.expired`` event each, and a notification. Returns how many."""
    expired = list(
        Step.objects.filter(
            status=StepStatus.RUNNING, lease_until__lt=Now(), run__status__in=RUN_EXECUTABLE
        ).values_list("pk", "run_id", "attempt", "owner")[:batch]
    )
    done = 0
    for step_id, run_id, attempt, owner in expired:
        with run_transaction(run_id) as tx:
            if leases.release_expired_lease(tx, step_id, attempt, owner, actor=actor):
                dispatch.notify_on_commit(run_id, step_id, attempt)
                done += 1
    return done


def renotify_due_steps(actor: str, batch: int, *, force: bool = False) -> int:
    """PENDING steps that are due and whose last notification may be lost: enqueue again.

    Due for a notification when never notified, notified before ``not_before`` (a retry
    backoff), or notified longer ago than ``AGENTOPS_RENOTIFY_SECONDS``; ``force`` (worker
    start-up) re-notifies every due step. No-op with database polling.
    """
    if dispatch.mode() != "rq":
        return 0
    stale = Now() - timedelta(seconds=settings.AGENTOPS_RENOTIFY_SECONDS)
    # A run waiting for a place of its concurrency key is notified once a place frees.
    query = concurrency.startable(
        Step.objects.filter(
            status=StepStatus.PENDING, not_before__lte=Now(), run__status__in=RUN_EXECUTABLE
        )
    )
    if not force:
        query = query.filter(
            Q(notified_at__isnull=True)
            | Q(notified_at__lt=stale)
            | Q(notified_at__lt=F("not_before"))
        )
    due = list(query.order_by("not_before").values_list("pk", "run_id", "attempt")[:batch])
    sent = 0
    for step_id, run_id, attempt in due:
        Step.objects.filter(pk=step_id).update(notified_at=Now())
        try:
            dispatch.notify_now(run_id, step_id, attempt)
            sent += 1
        except Exception:  # noqa: BLE001 - Redis down: try again next sweep
            logger.warning("re-notify of step %s failed; Redis unavailable?", step_id)
            Step.objects.filter(pk=step_id).update(notified_at=None)
            break
    return sent


#: Sweep tasks beyond leases and notifications, ``{name: fn(actor, batch) -> int}``, run
#: in registration order; filled by ``register_task`` where the app starts.
EXTRA_TASKS: dict[str, Callable[[str, int], int]] = {}

#: When the next timed thing falls due (a schedule's next tick, a signal wait's
#: deadline), ``{name: fn() -> aware datetime | None}``; filled by ``register_next_due``.
NEXT_DUE: dict[str, Callable[[], datetime | None]] = {}


def register_task(name: str, task: Callable[[str, int], int]) -> None:
    """Run ``task(actor, batch)`` (returning how many things it did) on every sweep,
    counted under ``name`` in the ``SweepReport``. Raises ``ValueError`` when ``name`` is
    already registered."""
    if name in EXTRA_TASKS:
        raise ValueError(f"sweep task {name!r} is already registered")
    EXTRA_TASKS[name] = task


def register_next_due(name: str, next_due: Callable[[], datetime | None]) -> None:
    """Wake the sweeper when ``next_due()`` (an aware datetime, or ``None`` for nothing
    pending) falls due. Raises ``ValueError`` when ``name`` is already registered."""
    if name in NEXT_DUE:
        raise ValueError(f"next-due hook {name!r} is already registered")
    NEXT_DUE[name] = next_due


def seconds_until_due(longest: float) -> float:
    """Seconds until the earliest of: a PENDING step held back by a timer (with RQ, the
    sweeper notifies it when due) and what ``NEXT_DUE`` reports; at most ``longest``,
    at least 0.01. The sweeper sleeps this long, so a timer or a tick is acted on when
    it falls due, not up to a whole period later."""
    times = [hook() for hook in NEXT_DUE.values()]
    if dispatch.mode() == "rq":
        times.append(
            Step.objects.filter(
                status=StepStatus.PENDING,
                not_before__gt=Now(),
                notified_at__isnull=True,
                run__status__in=RUN_EXECUTABLE,
            )
            .order_by("not_before")
            .values_list("not_before", flat=True)
            .first()
        )
    due = [t for t in times if t is not None]
    if not due:
        return longest
    wait = (min(due) - db_now()).total_seconds()
    return max(0.01, min(longest, wait))


def sweep_once(actor: str, *, force: bool = False, batch: int | None = None) -> SweepReport:
    """Run every sweep task once with bounded batches; returns the counts."""
    batch = batch or settings.AGENTOPS_SWEEP_BATCH
    report = SweepReport()
    report.add("expired_leases", reclaim_expired_leases(actor, batch))
    report.add("renotified", renotify_due_steps(actor, batch, force=force))
    for name, task in EXTRA_TASKS.items():
        report.add(name, task(actor, batch))
    return report


def acquire_maintenance_lease(name: str, owner: str, ttl: float) -> bool:
    """Take or renew the named maintenance lease for ``ttl`` seconds; ``True`` if held.

    One conditional UPDATE decides (like a step claim); the row is created on first use.
    """
    MaintenanceLease.objects.get_or_create(name=name)
    sql = (
        f"UPDATE runs_maintenancelease SET owner = %s, lease_until = {now_plus_sql()} "
        f"WHERE name = %s AND (owner = %s OR lease_until IS NULL OR lease_until < {now_sql()})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [owner, seconds_param(ttl), name, owner])
        return cursor.rowcount == 1
