"""Notifications that a step is due (DESIGN section 6).

With ``REDIS_URL`` set, a django-rq job carrying only ``(run_id, step_id, attempt)`` is
enqueued once the transaction that created or released the step has committed. Without
it, workers poll the database and notifications are no-ops. Either way the database is
the truth: a lost notification is re-sent by the sweeper, a duplicate finds the step
taken and is dropped.
"""

import logging

from django.conf import settings
from django.db import transaction

logger = logging.getLogger("agentops.dispatch")

JOB_FUNC = "runs.engine.jobs.execute_step_job"


def mode() -> str:
    """``"rq"`` when ``REDIS_URL`` is set, else ``"db"`` (database polling)."""
    return "rq" if settings.REDIS_URL else "db"


def queue_name_for(run) -> str:
    """The RQ queue a run's steps go to (one queue today; a hook for routing later)."""
    return "default"


def notify_now(run_id, step_id: int, attempt: int = 0, queue: str = "default") -> None:
    """Enqueue the notification immediately (caller guarantees the step row is committed).
    Raises redis errors to the caller."""
    if mode() != "rq":
        return
    import django_rq

    django_rq.get_queue(queue).enqueue(
        JOB_FUNC, str(run_id), step_id, attempt,
        result_ttl=0, failure_ttl=3600, job_timeout=settings.RQ_QUEUES["default"]["DEFAULT_TIMEOUT"],
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
            logger.warning("notification for step %s not sent (%s: %s); the sweeper will retry",
                           step_id, type(exc).__name__, exc)

    transaction.on_commit(send)
