"""Leases with fencing tokens.

Claiming a step is one conditional UPDATE that increments ``attempt``; the new attempt
is the fencing token that every later write of the claimer must present. All times are
the database's (``runs.engine.state.clock``).
"""

from django.db import connection
from django.db.models import Q
from django.db.models.functions import Now

from runs.engine.state.clock import now_plus_sql, now_sql, seconds_param
from runs.models import Step
from runs.states import RUN_EXECUTABLE, StepStatus


def due() -> Q:
    """The steps a worker could claim now: PENDING and due, or RUNNING with an expired
    lease (on the database clock)."""
    return Q(status=StepStatus.PENDING, not_before__lte=Now()) | Q(
        status=StepStatus.RUNNING, lease_until__lt=Now()
    )


def due_step_ids(limit: int = 10) -> list[int]:
    """Ids of up to ``limit`` due steps (``due``) in runs that may execute (a run
    waiting for a place of its concurrency key is left out), oldest ``not_before``
    first."""
    from runs.engine.state import concurrency

    return list(
        concurrency.startable(
            Step.objects.filter(
                due(), run__status__in=RUN_EXECUTABLE, run__pause_requested_at__isnull=True
            )
        )
        .order_by("not_before")
        .values_list("pk", flat=True)[:limit]
    )


def claim_step(step_id: int, worker_id: str, ttl: float) -> int | None:
    """Claim ``step_id`` for ``worker_id`` with a lease of ``ttl`` seconds.

    Claimable: PENDING with ``not_before`` passed, or RUNNING with an expired lease (the
    lease is reclaimed). Returns the new attempt number (the fencing token), or ``None`` when the
    row did not match: someone else holds it or it is not due. Run this inside
    ``run_transaction`` so the run row is locked first.
    """
    now = now_sql()
    sql = (
        f"UPDATE runs_step SET status = %s, attempt = attempt + 1, owner = %s, "
        f"lease_until = {now_plus_sql()}, heartbeat_at = {now}, "
        f"started_at = COALESCE(started_at, {now}), finished_at = NULL "
        f"WHERE id = %s AND ((status = %s AND not_before <= {now}) "
        f"OR (status = %s AND lease_until < {now})) RETURNING attempt"
    )
    params = [
        StepStatus.RUNNING,
        worker_id,
        seconds_param(ttl),
        step_id,
        StepStatus.PENDING,
        StepStatus.RUNNING,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return row[0] if row else None


#: What ``renew_leases`` reports instead of the run's status while a pause of the run is
#: requested (not a run status: the run keeps its own until the pause is carried out).
PAUSE_REQUESTED = "PAUSE_REQUESTED"


def renew_leases(held: list[tuple[int, int]], ttl: float) -> dict[int, str]:
    """Heartbeat for many steps in one statement: extend the lease of each ``(step_id,
    attempt)`` in ``held`` by ``ttl`` seconds from now, only while that attempt still
    holds the RUNNING step, and read each renewed step's run status in the same
    statement (a cancel requested since the last beat shows there; a requested pause
    shows as ``PAUSE_REQUESTED``). Returns ``{step_id: run status}`` of the renewed
    steps; a step missing from it lost its lease. One statement on PostgreSQL and SQLite
    alike (SQLite 3.35+ evaluates the subquery of ``RETURNING`` per row)."""
    if not held:
        return {}
    fence = " OR ".join(["(id = %s AND attempt = %s)"] * len(held))
    sql = (
        f"UPDATE runs_step SET lease_until = {now_plus_sql()}, heartbeat_at = {now_sql()} "
        f"WHERE status = %s AND ({fence}) "
        "RETURNING id, (SELECT CASE WHEN r.pause_requested_at IS NULL THEN r.status "
        "ELSE %s END FROM runs_run r WHERE r.id = runs_step.run_id)"
    )
    params: list = [seconds_param(ttl), StepStatus.RUNNING]
    for step_id, attempt in held:
        params += [step_id, attempt]
    params.append(PAUSE_REQUESTED)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0]: row[1] for row in cursor.fetchall()}


def hand_back(
    tx,
    step_id: int,
    attempt: int,
    *,
    actor: str,
    event_type: str,
    payload: dict,
    only_if: Q | None = None,
) -> bool:
    """Move a RUNNING step back to PENDING, due now and unowned, fenced on ``attempt``
    (and ``only_if``), with event ``event_type``, in the locked run's transaction ``tx``.
    The one move behind a lease given back, expired or held by a dead owner. Returns
    ``False`` when the attempt no longer holds the step. The caller notifies workers."""
    return tx.transition_step(
        step_id,
        StepStatus.PENDING,
        expected=StepStatus.RUNNING,
        attempt=attempt,
        only_if=only_if,
        actor=actor,
        event_type=event_type,
        payload=payload,
        progress=False,
        owner="",
        lease_until=None,
        not_before=Now(),
        notified_at=Now(),
    )


def release_lease(tx, step_id: int, attempt: int, *, actor: str, reason: str) -> bool:
    """The holder gives a RUNNING step back before running it (a stopping worker with a
    step its commit had claimed for it): PENDING again, fenced on ``attempt``, with a
    ``lease.released`` event, in the locked run's transaction ``tx``; workers are
    notified after commit. Returns ``False`` when the attempt no longer holds it."""
    from runs.engine.execution import dispatch

    released = hand_back(
        tx,
        step_id,
        attempt,
        actor=actor,
        event_type="lease.released",
        payload={"attempt": attempt, "reason": reason},
    )
    if released:
        dispatch.notify_on_commit(tx.run.pk, step_id, attempt)
    return released


def release_expired_lease(tx, step_id: int, attempt: int, owner: str, *, actor: str) -> bool:
    """Move a RUNNING step whose lease has passed back to PENDING, fenced on the
    ``attempt`` seen and on ``lease_until < now()``, with a ``lease.expired`` event, in the
    locked run's transaction ``tx``. Returns ``False`` when the lease was renewed or
    someone else moved first. The caller notifies workers."""
    return hand_back(
        tx,
        step_id,
        attempt,
        actor=actor,
        event_type="lease.expired",
        payload={"attempt": attempt, "owner": owner},
        only_if=Q(lease_until__lt=Now()),
    )
