"""The one gateway for status writes and the event log (DESIGN sections 1.3, 4).

Every change of a run's or a step's status goes through a conditional UPDATE here:
the expected status (and, for runs, optionally the version; for steps, the fencing
attempt) is in the WHERE clause, and a row count other than 1 means someone else moved
first, so the caller must not overwrite. The event describing the change is written in
the same transaction.

Lock order: a transaction that touches a run and its steps locks the run row first
(``run_transaction``), then step rows. Keeping one order means PostgreSQL never has to
break a deadlock between a committing worker and an operator's cancel.
"""

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from runs.models import Event, Run, Step
from runs.states import (
    RUN_TERMINAL,
    IllegalTransition,
    RunStatus,
    StepStatus,
    run_can,
    step_can,
)

#: ``fn(run_id, thread_id, status)`` called after the commit of each transaction that
#: moved a run to a terminal state (the thread's queued message starts its run).
RUN_FINISHED_HOOKS: list[Callable[[Any, int, str], None]] = []

#: ``fn(tx)`` called right after ``run_transaction`` locked the run row, before the
#: caller's block runs; raising rolls the transaction back (client preconditions).
RUN_LOCKED_HOOKS: list[Callable[["RunTx"], None]] = []


@dataclass
class EventSpec:
    """An event to append: ``type`` (dotted, e.g. ``step.succeeded``), JSON ``payload``,
    the ``step_id`` it concerns (or ``None``) and the ``actor`` (worker id or user)."""

    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    step_id: int | None = None
    actor: str = ""


class RunTx:
    """A short transaction on one locked run; collects events and writes them at the end.

    ``run`` is the locked row as read at the start (status, version, generation, ...).
    """

    def __init__(self, run: Run):
        self.run = run
        self._events: list[EventSpec] = []
        self._progress = False
        self._run_fields: dict[str, Any] = {}

    def event(
        self,
        type: str,
        payload: dict | None = None,
        *,
        step_id: int | None = None,
        actor: str = "",
        progress: bool = True,
    ) -> None:
        """Queue an event; ``progress=False`` for events that do not count as the run
        moving forward (the watchdog's own flags)."""
        self._events.append(EventSpec(type, payload or {}, step_id, actor))
        self._progress = self._progress or progress

    def set_run(self, **fields: Any) -> None:
        """Plain (non-status) columns of the run to write with the events' UPDATE of the
        run row at the end of the transaction: one statement instead of two."""
        self._run_fields.update(fields)

    def flush(self) -> list[int]:
        """Allocate gap-free seqs for the queued events and insert them; returns the seqs.

        Seqs are allocated under the run-row lock, so their order is the commit order:
        an SSE reader never sees seq n+1 committed before seq n.
        """
        if not self._events:
            if self._run_fields:
                Run.objects.filter(pk=self.run.pk).update(**self._run_fields)
                self._run_fields.clear()
            return []
        first = self.run.event_seq + 1
        last = self.run.event_seq + len(self._events)
        updates: dict[str, Any] = {
            **self._run_fields,
            "event_seq": last,
            "last_event_at": Now(),
            "updated_at": Now(),
        }
        self._run_fields.clear()
        if self._progress:
            updates["stuck_since"] = None
        Run.objects.filter(pk=self.run.pk).update(**updates)
        Event.objects.bulk_create(
            [
                Event(
                    run_id=self.run.pk,
                    step_id=e.step_id,
                    seq=first + i,
                    type=e.type,
                    payload=e.payload,
                    actor=e.actor,
                )
                for i, e in enumerate(self._events)
            ]
        )
        self.run.event_seq = last
        self._events.clear()
        return list(range(first, last + 1))

    def transition_run(
        self,
        target: str,
        *,
        actor: str,
        reason: str = "",
        payload: dict | None = None,
        **fields: Any,
    ) -> bool:
        """Move the locked run from its current status to ``target``.

        Returns ``False`` (and records ``transition.rejected``) when the run is terminal;
        raises ``IllegalTransition`` for any other move the table forbids.
        """
        source = self.run.status
        if source in RUN_TERMINAL:
            self.event(
                "transition.rejected",
                {
                    "entity": "run",
                    "from": source,
                    "to": target,
                    "reason": reason or "run is terminal",
                },
                actor=actor,
                progress=False,
            )
            return False
        if not run_can(source, target):
            raise IllegalTransition("run", source, target)
        updated = Run.objects.filter(
            pk=self.run.pk, status=source, version=self.run.version
        ).update(status=target, version=F("version") + 1, **fields)
        if updated != 1:
            # Cannot happen while we hold the row lock; guard against misuse anyway.
            raise IllegalTransition("run", source, target)
        self.run.status = target
        self.run.version += 1
        if target in RUN_TERMINAL:
            for hook in RUN_FINISHED_HOOKS:
                transaction.on_commit(
                    partial(hook, self.run.pk, self.run.thread_id, target), robust=True
                )
        self.event(
            f"run.{target.lower()}",
            {"from": source, "reason": reason, **(payload or {})},
            actor=actor,
        )
        return True

    def transition_step(
        self,
        step_id: int,
        target: str,
        *,
        expected: str | Iterable[str],
        attempt: int | None = None,
        actor: str,
        event_type: str | None = None,
        payload: dict | None = None,
        only_if: Q | None = None,
        progress: bool = True,
        **fields: Any,
    ) -> bool:
        """Conditionally move a step of this run from one of ``expected`` to ``target``.

        With ``attempt`` set the update is fenced: it applies only while the step's
        attempt still equals it; ``only_if`` adds a further condition to the WHERE clause.
        Returns ``False`` when the row did not match (someone else moved first); raises
        ``IllegalTransition`` for a move the table forbids.
        """
        sources = [expected] if isinstance(expected, str) else list(expected)
        for source in sources:
            if not step_can(source, target):
                raise IllegalTransition("step", source, target)
        query = Step.objects.filter(pk=step_id, run_id=self.run.pk, status__in=sources)
        if attempt is not None:
            query = query.filter(attempt=attempt)
        if only_if is not None:
            query = query.filter(only_if)
        if query.update(status=target, **fields) != 1:
            return False
        self.event(
            event_type or f"step.{target.lower()}",
            payload or {},
            step_id=step_id,
            actor=actor,
            progress=progress,
        )
        return True


@contextmanager
def run_transaction(run_id) -> Iterator[RunTx]:
    """Open a transaction, lock the run row, yield a ``RunTx``, write its events, commit.

    Raises ``Run.DoesNotExist`` if the run is gone. An exception inside the block rolls
    everything back, events included.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        tx = RunTx(run)
        for hook in RUN_LOCKED_HOOKS:
            hook(tx)
        yield tx
        tx.flush()


def record_event(
    run_id,
    type: str,
    payload: dict | None = None,
    *,
    step_id: int | None = None,
    actor: str = "",
    progress: bool = True,
) -> int:
    """Append one event in its own transaction; returns its seq."""
    with run_transaction(run_id) as tx:
        tx.event(type, payload, step_id=step_id, actor=actor, progress=progress)
        return tx.flush()[0]


def transition_run(
    run_id,
    target: str,
    *,
    expected: str | Iterable[str] | None = None,
    actor: str,
    reason: str = "",
    payload: dict | None = None,
    **fields: Any,
) -> bool:
    """Apply one run transition in its own transaction.

    ``expected``: the status(es) the caller believes the run is in; if the run has moved
    elsewhere, nothing changes and ``False`` is returned (a terminal run also gets a
    ``transition.rejected`` event). Raises ``IllegalTransition`` for a forbidden move.
    """
    with run_transaction(run_id) as tx:
        allowed = (
            None
            if expected is None
            else ({expected} if isinstance(expected, str) else set(expected))
        )
        if allowed is not None and tx.run.status not in allowed:
            if tx.run.status in RUN_TERMINAL:
                tx.event(
                    "transition.rejected",
                    {
                        "entity": "run",
                        "from": tx.run.status,
                        "to": target,
                        "reason": reason or "run is terminal",
                    },
                    actor=actor,
                    progress=False,
                )
            return False
        return tx.transition_run(target, actor=actor, reason=reason, payload=payload, **fields)


__all__ = [
    "EventSpec",
    "RunTx",
    "run_transaction",
    "record_event",
    "transition_run",
    "RunStatus",
    "StepStatus",
]
