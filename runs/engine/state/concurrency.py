"""Concurrency limits: how many runs of one key may be in flight at once.

A run whose workflow declares a concurrency key carries it (``Run.concurrency_key``,
``"<workflow>:<value from the input>"``) and its limit from creation on. It takes a
place when its first step is claimed (PENDING to RUNNING, which happens once per run)
and holds it until it ends: every status but PENDING and the terminal ones is in flight
(running, waiting for an approval or a signal, paused, cancel requested).

``may_start`` decides the claim of a PENDING run with a key, inside the claim's
transaction on the locked run row, after a lock on the key (a transaction advisory lock
on PostgreSQL; SQLite's IMMEDIATE transactions already hold its one write lock): the
count it then reads includes every claim of that key committed before, so two workers
claiming runs of one key at once take turns and never both take the last place. Runs of
one key start in order of creation: a run is admitted only while the free places
exceed the older runs of its key still waiting.

The one-statement claims (``one_claim``) claim no PENDING run with a key: they leave it
to the general claim, which asks ``may_start``. ``startable`` filters the steps a
polling worker tries and the sweeper re-notifies, so runs that cannot start yet cost
neither a claim nor a notification while they wait.

A place freed is noticed at once: ``notify_next`` (a run-finished hook) notifies the
due steps of the oldest runs of the key still waiting, as many as places are free,
after the commit that ended the run. A polling worker finds them on its next poll.
"""

import logging

from django.db import connection
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce, Now

from runs.engine.execution import dispatch
from runs.models import Run, Step
from runs.states import RUN_TERMINAL, RunStatus, StepStatus

logger = logging.getLogger("agentops.concurrency")

#: Run statuses that hold a place of their key.
IN_FLIGHT = frozenset(RunStatus.values) - RUN_TERMINAL - {RunStatus.PENDING}

#: First key of the per-key transaction advisory lock (``pg_advisory_xact_lock(int4,
#: int4)``), apart from the workers' liveness locks.
LOCK_NAMESPACE = 0x41474F43


def may_start(run: Run) -> bool:
    """Whether the PENDING ``run`` may take a place of its concurrency key now: fewer
    runs of the key in flight, plus older runs of the key still PENDING, than its
    limit. Always true for a run without a key or one that is no longer PENDING. Call
    it inside ``run_transaction(run.pk)`` and claim in the same transaction: the key
    stays locked until it commits. Database errors propagate."""
    if not run.concurrency_key or run.status != RunStatus.PENDING:
        return True
    key = run.concurrency_key
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [LOCK_NAMESPACE, key])
    limit = run.concurrency_limit or 1
    held = Run.objects.filter(concurrency_key=key, status__in=IN_FLIGHT).count()
    if held >= limit:
        return False
    # The run's own stored time, not the Python value: SQLite compares them as text.
    created = Subquery(Run.objects.filter(pk=run.pk).values("created_at")[:1])
    older = Run.objects.filter(concurrency_key=key, status=RunStatus.PENDING).filter(
        Q(created_at__lt=created) | Q(created_at=created, pk__lt=run.pk)
    )
    return held + older.values("pk")[: limit - held].count() < limit


def _blocked_runs() -> QuerySet:
    """The PENDING runs with a key whose places are all taken (their ids)."""
    held = Subquery(
        Run.objects.filter(concurrency_key=OuterRef("concurrency_key"), status__in=IN_FLIGHT)
        .order_by()
        .values("concurrency_key")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return (
        Run.objects.filter(status=RunStatus.PENDING)
        .exclude(concurrency_key="")
        .annotate(places_held=Coalesce(held, 0))
        .filter(places_held__gte=F("concurrency_limit"))
    )


def startable(steps: QuerySet) -> QuerySet:
    """``steps`` (a Step queryset) without those of PENDING runs whose key has every
    place taken. A hint for who to try: ``may_start`` decides."""
    return steps.exclude(run__in=_blocked_runs().values("pk"))


def waiting_by_workflow() -> dict[str, int]:
    """``{workflow: runs}``: PENDING runs waiting because every place of their key is
    taken, per workflow (for the overview and ``/metrics``)."""
    rows = _blocked_runs().order_by().values("workflow").annotate(n=Count("pk"))
    return {row["workflow"]: row["n"] for row in rows}


def notify_next(run_id, thread_id: int, status: str, thread_locked: bool) -> None:
    """Run-finished hook (after the commit that ended ``run_id``): when the run had a
    concurrency key, notify (under RQ) the due steps of the oldest PENDING runs of that
    key, one run per free place, in order of creation. Their claims still ask
    ``may_start``. No query with database polling (the next poll finds them), one for
    a run without a key. A Redis failure is logged: the sweeper notifies them later."""
    if dispatch.mode() != "rq":
        return
    row = (
        Run.objects.filter(pk=run_id)
        .exclude(concurrency_key="")
        .values_list("concurrency_key", "concurrency_limit")
        .first()
    )
    if row is None:
        return
    key, limit = row
    free = (limit or 1) - Run.objects.filter(concurrency_key=key, status__in=IN_FLIGHT).count()
    if free <= 0:
        return
    waiting = (
        Run.objects.filter(concurrency_key=key, status=RunStatus.PENDING)
        .order_by("created_at", "pk")
        .values("pk")[:free]
    )
    due = Step.objects.filter(
        run__in=waiting, status=StepStatus.PENDING, not_before__lte=Now()
    ).values_list("pk", "run_id", "attempt")
    for step_id, step_run_id, attempt in list(due):
        Step.objects.filter(pk=step_id).update(notified_at=Now())
        try:
            dispatch.notify_now(step_run_id, step_id, attempt)
        except Exception as exc:  # noqa: BLE001 - Redis down: the sweeper notifies it
            logger.warning(
                "notification for step %s not sent (%s: %s); the sweeper will retry",
                step_id,
                type(exc).__name__,
                exc,
            )
            Step.objects.filter(pk=step_id).update(notified_at=None)
            return
