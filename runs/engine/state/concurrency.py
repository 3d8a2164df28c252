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

A step may declare a key of its own (``Step.concurrency_key``, ``"<workflow>.<step>:
<value from the input>"``, set by ``step_key`` when the step is scheduled; null for a
step without one). Its place is held while the step is RUNNING, not while it waits for
an approval, a signal or child runs (it holds no lease then, and a wait of hours must
not stop the key's other steps). ``may_run_step`` decides the claim of a PENDING step
with a key under the same lock and the same order rule (older due PENDING steps of the
key first); the one-statement claims leave such a step to it, and the chained commit
never bears a keyed step claimed. ``notify_next_step`` (after the commit that moved a
keyed step out of RUNNING) notifies the oldest steps still waiting.
"""

import logging
from typing import Any

from django.db import connection
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce, Now

from runs.engine.errors import StepError
from runs.engine.execution import dispatch
from runs.models import Run, Step
from runs.states import RUN_EXECUTABLE, RUN_TERMINAL, RunStatus, StepStatus

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
    _lock(key)
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


#: Error code of a step whose run's input gives no value for its concurrency key.
CONCURRENCY_KEY_INVALID = "CONCURRENCY_KEY_INVALID"


def _lock(key: str) -> None:
    """Lock ``key`` until the transaction ends (PostgreSQL; SQLite's write lock is
    already held)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [LOCK_NAMESPACE, key])


def _definition(run: Run):
    """The run's workflow definition, or ``None`` when this process has none."""
    from runs.workflows import registry

    try:
        return registry.get(run.workflow, run.workflow_version)
    except Exception:  # noqa: BLE001 - an unknown version: no step of it can run here
        return None


def has_step_keys(run: Run) -> bool:
    """Whether a step of ``run``'s workflow declares a concurrency key (no query; true
    when the definition is unknown here, so nothing is missed)."""
    wf = _definition(run)
    return wf is None or any(s.concurrency_key is not None for s in wf.steps)


def step_key(run: Run, name: str) -> tuple[str | None, int | None]:
    """``(key, limit)`` of step ``name`` scheduled now in ``run``: ``(None, None)`` for a
    step without a key (or a definition unknown here). Raises ``StepError``
    (``CONCURRENCY_KEY_INVALID``) when the run's input gives no value for the key (the
    start refuses such an input; a key function that changed since may not)."""
    wf = _definition(run)
    if wf is None or not wf.has(name):
        return None, None
    found = wf.step_concurrency_of(wf.get(name), run.input)
    if found is None:
        raise StepError(
            CONCURRENCY_KEY_INVALID, f"the run's input gives no concurrency key for step {name!r}"
        )
    return found


def may_run_step(step: Step) -> bool:
    """Whether the PENDING ``step`` may take a place of its concurrency key now: fewer
    steps of the key RUNNING, plus older due PENDING steps of the key, than its limit.
    Always true for a step without a key or one already RUNNING (a reclaim keeps its
    place). Call it inside the claim's ``run_transaction`` and claim in it. Database
    errors propagate."""
    if step.concurrency_key is None or step.status != StepStatus.PENDING:
        return True
    key = step.concurrency_key
    _lock(key)
    limit = step.concurrency_limit or 1
    held = Step.objects.filter(concurrency_key=key, status=StepStatus.RUNNING).count()
    if held >= limit:
        return False
    older = _waiting_steps(key).filter(pk__lt=step.pk)
    return held + older.values("pk")[: limit - held].count() < limit


def _waiting_steps(key: str) -> QuerySet:
    """The due PENDING steps of ``key`` in runs that may execute, oldest first."""
    return Step.objects.filter(
        concurrency_key=key,
        status=StepStatus.PENDING,
        not_before__lte=Now(),
        run__status__in=RUN_EXECUTABLE,
    ).order_by("pk")


def _blocked_steps() -> QuerySet:
    """The due PENDING steps with a key whose places are all taken (a step waiting
    for its retry's backoff waits on no limit)."""
    held = Subquery(
        Step.objects.filter(concurrency_key=OuterRef("concurrency_key"), status=StepStatus.RUNNING)
        .order_by()
        .values("concurrency_key")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return (
        Step.objects.filter(
            status=StepStatus.PENDING, concurrency_key__isnull=False, not_before__lte=Now()
        )
        .annotate(places_held=Coalesce(held, 0))
        .filter(places_held__gte=F("concurrency_limit"))
    )


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
    """``steps`` (a Step queryset) without those of PENDING runs, and the PENDING steps,
    whose key has every place taken. A hint for who to try: ``may_start`` and
    ``may_run_step`` decide."""
    return steps.exclude(run__in=_blocked_runs().values("pk")).exclude(
        pk__in=_blocked_steps().values("pk")
    )


def waiting_by_workflow() -> dict[str, int]:
    """``{limit: waiting}``: per workflow, its PENDING runs waiting because every place
    of their key is taken, and per ``"<workflow>.<step>"``, its PENDING steps waiting
    likewise on the step's key (for the overview and ``/metrics``)."""
    rows = _blocked_runs().order_by().values("workflow").annotate(n=Count("pk"))
    waiting = {row["workflow"]: row["n"] for row in rows}
    steps = _blocked_steps().order_by().values("run__workflow", "name").annotate(n=Count("pk"))
    for row in steps:
        waiting[f"{row['run__workflow']}.{row['name']}"] = row["n"]
    return waiting


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
    _notify(list(due))


def notify_next_step(step_id: int) -> None:
    """After the commit that moved ``step_id`` out of RUNNING: when it has a
    concurrency key, notify (under RQ) the oldest due steps still waiting for a place
    of that key, one per free place. Their claims still ask ``may_run_step``. No query
    with database polling, one for a step without a key. A Redis failure is logged: the
    sweeper notifies them later."""
    if dispatch.mode() != "rq":
        return
    row = (
        Step.objects.filter(pk=step_id, concurrency_key__isnull=False)
        .values_list("concurrency_key", "concurrency_limit")
        .first()
    )
    if row is None:
        return
    key, limit = row
    if key is None:
        return
    free = (limit or 1) - Step.objects.filter(
        concurrency_key=key, status=StepStatus.RUNNING
    ).count()
    if free <= 0:
        return
    _notify(list(_waiting_steps(key).values_list("pk", "run_id", "attempt")[:free]))


def _notify(due: list[tuple[int, Any, int]]) -> None:
    """Notify the steps ``due`` (``(step id, run id, attempt)``) under RQ, marking each
    notified; on a Redis failure, unmark it and stop (the sweeper sends the rest)."""
    for step_id, run_id, attempt in due:
        Step.objects.filter(pk=step_id).update(notified_at=Now())
        try:
            dispatch.notify_now(run_id, step_id, attempt)
        except Exception as exc:  # noqa: BLE001 - Redis down: the sweeper notifies it
            logger.warning(
                "notification for step %s not sent (%s: %s); the sweeper will retry",
                step_id,
                type(exc).__name__,
                exc,
            )
            Step.objects.filter(pk=step_id).update(notified_at=None)
            return
