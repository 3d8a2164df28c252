"""Notifications that a step is due.

With ``REDIS_URL`` set, a django-rq job carrying only ``(run_id, step_id, attempt)`` is
enqueued once the transaction that created or released the step has committed. Without
it, workers poll the database and notifications are no-ops. Either way the database is
the truth: a lost notification is re-sent by the sweeper, a duplicate finds the step
taken and is dropped.
"""

import logging
from typing import Any

from django.conf import settings
from django.db import transaction

logger = logging.getLogger("agentops.dispatch")

JOB_FUNC = "runs.engine.execution.jobs.execute_step_job"


def mode() -> str:
    """``"rq"`` when ``REDIS_URL`` is set, else ``"db"`` (database polling)."""
    return "rq" if settings.REDIS_URL else "db"


def queue_name_for(run) -> str:
    """The RQ queue a run's steps go to (one queue today; a hook for routing later)."""
    return "default"


_queues: dict[tuple[str, str], object] = {}


def get_queue(name: str = "default"):
    """The RQ queue ``name``, built once per process and configuration: django_rq's
    ``get_queue`` makes a new Redis client (a new TCP connection) on every call, which
    cost more than the rest of a notification. redis-py reconnects a pooled client by
    itself after a Redis restart."""
    import django_rq

    key = (name, repr(sorted(settings.RQ_QUEUES[name].items())))
    queue = _queues.get(key)
    if queue is None:
        queue = _queues[key] = django_rq.get_queue(name)
    return queue


def notify_now(run_id, step_id: int, attempt: int = 0, queue: str = "default") -> None:
    """Enqueue the notification immediately (caller guarantees the step row is committed).
    Raises redis errors to the caller."""
    if mode() != "rq":
        return
    get_queue(queue).enqueue(
        JOB_FUNC,
        str(run_id),
        step_id,
        attempt,
        result_ttl=0,
        failure_ttl=3600,
        job_timeout=settings.RQ_QUEUES["default"]["DEFAULT_TIMEOUT"],
    )


def notify_on_commit(run_id, step_id: int, attempt: int = 0, queue: str = "default") -> None:
    """Enqueue after the current transaction commits (never before the row exists).

    A Redis failure is logged, not raised: the step is saved and the sweeper re-notifies.
    """
    if mode() != "rq":
        return

    def send() -> None:
        try:
            notify_now(run_id, step_id, attempt, queue)
        except Exception as exc:  # noqa: BLE001 - any Redis failure leaves recovery to the sweeper
            logger.warning(
                "notification for step %s not sent (%s: %s); the sweeper will retry",
                step_id,
                type(exc).__name__,
                exc,
            )

    transaction.on_commit(send)


def notify_many_on_commit(run_id, step_ids: list[int], queue: str = "default") -> None:
    """``notify_on_commit`` for many steps of one run (a map step's branches): enqueued
    in batches through one Redis pipeline each after the commit. A Redis failure is
    logged, not raised: the sweeper re-notifies the steps it left out."""
    if mode() != "rq" or not step_ids:
        return

    def send() -> None:
        rq_queue: Any = get_queue(queue)
        timeout = settings.RQ_QUEUES["default"]["DEFAULT_TIMEOUT"]
        try:
            for start in range(0, len(step_ids), _BATCH):
                rq_queue.enqueue_many(
                    [
                        rq_queue.prepare_data(
                            JOB_FUNC,
                            (str(run_id), step_id, 0),
                            result_ttl=0,
                            failure_ttl=3600,
                            timeout=timeout,
                        )
                        for step_id in step_ids[start : start + _BATCH]
                    ]
                )
        except Exception as exc:  # noqa: BLE001 - any Redis failure leaves recovery to the sweeper
            logger.warning(
                "notifications for %s steps of run %s not sent (%s: %s); the sweeper will retry",
                len(step_ids),
                run_id,
                type(exc).__name__,
                exc,
            )

    transaction.on_commit(send)


#: Notifications per Redis pipeline of ``notify_many_on_commit``.
_BATCH = 500
