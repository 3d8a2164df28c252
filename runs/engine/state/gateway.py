"""The one gateway for state writes and the event log.

Every change of a run's or a step's status goes through a conditional UPDATE here:
the expected status (and, for runs, optionally the version; for steps, the fencing
attempt) is in the WHERE clause, and a row count other than 1 means someone else moved
first, so the caller must not overwrite. The event describing the change is written in
the same transaction.

The gateway owns the moves built from those transitions, not only the transitions: a
feature calls a move and never re-implements one. ``RunTx`` has them: finish an attempt
behind its fence (``finish_attempt``, recording ``step.commit_rejected`` when the fence
refuses), save a checkpoint, ``advance`` (checkpoint, then schedule the next step or
finish the run), ``schedule_step``, ``schedule_branches`` (a map step's fan-out),
``cancel_branches``, ``supersede_branches``, ``next_step_seq``, ``resolve_takeover``,
``decide_approval``, ``set_compensation``, ``request_pause`` / ``clear_pause_request``,
``finish_waiting`` (with ``cancelled_before_wait``) and ``start_generation``; message seqs come
from ``allocate_message_seqs`` and ledger rows move with ``transition_operation``. The
state columns of the models refuse any other ``update()`` (``runs.state_fields``).

Lock order: a transaction that touches a run and its steps locks the run row first
(``run_transaction``), then step rows. Keeping one order means PostgreSQL never has to
break a deadlock between a committing worker and an operator's cancel.
"""

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Max, Q, QuerySet, Subquery
from django.db.models.functions import Now

from runs.engine.execution import dispatch
from runs.engine.state import checkpoints, concurrency
from runs.engine.state.clock import deadline_in
from runs.models import Approval, Event, Operation, Run, Step, Takeover
from runs.state_fields import write_state
from runs.states import (
    RUN_TERMINAL,
    STEP_OPEN,
    IllegalTransition,
    RunStatus,
    StepStatus,
    compensation_can,
    run_can,
    step_can,
)

#: ``{name: fn(run_id, thread_id, status, thread_locked)}``, called in registration
#: order after the commit of each transaction that moved a run to a terminal state (the
#: thread's queued message starts its run). ``thread_locked``: that transaction also held
#: the thread row (share lock) when it finished the run, so a message queued on the
#: thread meanwhile (under the thread row lock) is committed and visible to the hook's
#: first read. Filled by ``register_run_finished_hook`` where the app starts.
RUN_FINISHED_HOOKS: dict[str, Callable[[Any, int, str, bool], None]] = {}

#: ``{name: fn(tx)}``, called in registration order right after ``run_transaction``
#: locked the run row, before the caller's block runs; raising rolls the transaction
#: back (client preconditions). Filled by ``register_run_locked_hook``.
RUN_LOCKED_HOOKS: dict[str, Callable[["RunTx"], None]] = {}


def register_run_finished_hook(name: str, hook: Callable[[Any, int, str, bool], None]) -> None:
    """Call ``hook(run_id, thread_id, status, thread_locked)`` after every commit that
    finishes a run (``RUN_FINISHED_HOOKS``). Raises ``ValueError`` when ``name`` is
    already registered."""
    _register(RUN_FINISHED_HOOKS, "run-finished hook", name, hook)


def register_run_locked_hook(name: str, hook: Callable[["RunTx"], None]) -> None:
    """Call ``hook(tx)`` in every ``run_transaction`` right after the run row is locked
    (``RUN_LOCKED_HOOKS``). Raises ``ValueError`` when ``name`` is already registered."""
    _register(RUN_LOCKED_HOOKS, "run-locked hook", name, hook)


def _register(hooks: dict, kind: str, name: str, hook: Callable) -> None:
    # Two registrations of one name are two wirings of the app: say so at start-up
    # rather than run one of them silently.
    if name in hooks:
        raise ValueError(f"{kind} {name!r} is already registered")
    hooks[name] = hook


@dataclass
class EventSpec:
    """An event to append: ``type`` (dotted, e.g. ``step.succeeded``), JSON ``payload``,
    the ``step_id`` it concerns (or ``None``) and the ``actor`` (worker id or user)."""

    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    step_id: int | None = None
    actor: str = ""


class Advanced(NamedTuple):
    """What ``RunTx.advance`` did: the next step's id and seq (``None`` when the run
    finished or stopped) and the checkpoint it saved (id and whole ``state``)."""

    step_id: int | None
    seq: int | None
    checkpoint_id: int
    state: dict[str, Any]


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
        updated = write_state(
            Run.objects.filter(pk=self.run.pk, status=source, version=self.run.version),
            status=target,
            version=F("version") + 1,
            **fields,
        )
        if updated != 1:
            # Cannot happen while we hold the row lock; guard against misuse anyway.
            raise IllegalTransition("run", source, target)
        self.run.status = target
        self.run.version += 1
        if target in RUN_TERMINAL:
            for hook in RUN_FINISHED_HOOKS.values():
                transaction.on_commit(
                    partial(hook, self.run.pk, self.run.thread_id, target, False), robust=True
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
        if write_state(query, status=target, **fields) != 1:
            return False
        if (
            StepStatus.RUNNING in sources
            and target != StepStatus.RUNNING
            and concurrency.has_step_keys(self.run)
        ):
            # A place of the step's key may have freed: the next waiting step is told.
            transaction.on_commit(partial(concurrency.notify_next_step, step_id))
        self.event(
            event_type or f"step.{target.lower()}",
            payload or {},
            step_id=step_id,
            actor=actor,
            progress=progress,
        )
        return True

    # -- moves built from the transitions ---------------------------------------------

    def commit_rejection(self, step: Step, attempt: int) -> str | None:
        """Why a write fenced by ``attempt`` on ``step`` must not apply, or ``None`` if it
        may. Reads the step row (the run row is the locked ``self.run``)."""
        current = Step.objects.filter(pk=step.pk).values_list("status", "attempt").first()
        if current is None:
            return "step is gone"
        status, current_attempt = current
        if current_attempt != attempt:
            return f"stale attempt {attempt}; attempt {current_attempt} holds the step"
        if self.run.status in RUN_TERMINAL:
            return f"run is {self.run.status}"
        if self.run.generation != step.generation:
            return "step belongs to a superseded generation"
        if status != StepStatus.RUNNING:
            return f"step is {status}"
        if not Step.objects.filter(pk=step.pk, lease_until__gt=Now()).exists():
            return f"the lease of attempt {attempt} ran out"
        return None

    def reject_commit(self, step: Step, attempt: int, reason: str | None, **extra: Any) -> None:
        """Record ``step.commit_rejected`` for a late or stale write of ``attempt``;
        ``extra`` goes into the payload (``worker``, ``error_code``, ...)."""
        self.event(
            "step.commit_rejected",
            {"attempt": attempt, "reason": reason, **extra},
            step_id=step.pk,
            actor=extra.get("worker", ""),
            progress=False,
        )

    def finish_attempt(
        self,
        step: Step,
        attempt: int,
        target: str,
        *,
        actor: str,
        event_type: str | None = None,
        payload: dict | None = None,
        rejected: dict | None = None,
        **fields: Any,
    ) -> bool:
        """Move the RUNNING ``step`` held by ``attempt`` to ``target`` behind its fence:
        the UPDATE applies only while the run is not terminal, the step is in the run's
        generation, RUNNING and still at ``attempt``. When the fence refuses, a
        ``step.commit_rejected`` event (payload ``rejected`` plus attempt and reason) is
        recorded instead and ``False`` returned. The reason is looked up only then, so an
        accepted finish costs one statement."""
        applied = (
            self.run.status not in RUN_TERMINAL
            and self.run.generation == step.generation
            and self.transition_step(
                step.pk,
                target,
                expected=StepStatus.RUNNING,
                attempt=attempt,
                # An unexpired lease on the database clock, not only the attempt.
                only_if=Q(lease_until__gt=Now()),
                actor=actor,
                event_type=event_type,
                payload=payload,
                **fields,
            )
        )
        if not applied:
            extra = dict(rejected or {})
            extra.setdefault("worker", actor)
            self.reject_commit(step, attempt, self.commit_rejection(step, attempt), **extra)
        return applied

    def cancelled_before_wait(
        self, step: Step, attempt: int, *, actor: str, waiting_for: str
    ) -> bool:
        """When the locked run is cancel-requested, the RUNNING ``step`` held by
        ``attempt`` is CANCELLED behind its fence instead of starting to wait for
        ``waiting_for`` (``"signal wait"``, ``"child wait"``, ``"approval"``,
        ``"branches"``), and ``True`` is returned; ``False`` otherwise (nothing
        written)."""
        if self.run.status != RunStatus.CANCEL_REQUESTED:
            return False
        self.finish_attempt(
            step,
            attempt,
            StepStatus.CANCELLED,
            actor=actor,
            payload={"reason": f"cancel requested before the {waiting_for}"},
            owner="",
            lease_until=None,
            finished_at=Now(),
        )
        return True

    def finish_waiting(
        self,
        step: Step,
        attempt: int,
        *,
        actor: str,
        waiting_for: str,
        payload: dict | None = None,
        cancel_before: str,
        **fields: Any,
    ) -> bool:
        """Finish the RUNNING ``step``'s ``attempt`` into WAITING behind its fence: the
        lease released, ``step.waiting`` with ``{"attempt", "waiting_for", **payload}``,
        plain ``fields`` (``signal_name``, ``wait_until``) written with it. A run that is
        cancel-requested cancels the step instead (``cancelled_before_wait`` with
        ``cancel_before``). Returns ``True`` only when the step is WAITING."""
        if self.cancelled_before_wait(step, attempt, actor=actor, waiting_for=cancel_before):
            return False
        return self.finish_attempt(
            step,
            attempt,
            StepStatus.WAITING,
            actor=actor,
            event_type="step.waiting",
            payload={"attempt": attempt, "waiting_for": waiting_for, **(payload or {})},
            owner="",
            lease_until=None,
            **fields,
        )

    def next_step_seq(self, after: Step | None = None) -> int:
        """The seq of a new step of this run: one past ``after`` when the caller commits
        the run's newest step (no read), else one past the highest seq stored."""
        if after is not None:
            return after.seq + 1
        return (Step.objects.filter(run_id=self.run.pk).aggregate(m=Max("seq"))["m"] or 0) + 1

    def schedule_step(
        self,
        name: str,
        *,
        actor: str,
        seq: int | None = None,
        delay: float = 0.0,
        at: datetime | None = None,
        claimed_by: str | None = None,
    ) -> int:
        """Create step ``name`` in the locked run's current generation; returns its id.

        ``seq`` defaults to ``next_step_seq()``; ``delay`` (seconds from now on the
        database clock) or ``at`` (an aware instant) holds it back: a durable timer, the
        step PENDING with that ``not_before``, notified by the sweeper when it is due.
        Without ``claimed_by`` the step is PENDING and workers are notified after
        commit. With ``claimed_by`` (a worker id) the step is born RUNNING
        at attempt 1 under that worker's lease (``lease_seconds`` from settings), so the
        worker that committed its predecessor continues the run without a queue round
        trip; its ``step.started`` event follows ``step.scheduled``. A step with a
        concurrency key gets its key and limit (``concurrency.step_key``, which raises
        ``StepError`` when the input gives no value) and is never born claimed (its
        claim waits for a place): ``claimed_by`` with one raises ``ValueError``.
        """
        from django.conf import settings

        seq = self.next_step_seq() if seq is None else seq
        held = bool(delay) or at is not None
        not_before: Any = Now()
        if at is not None:
            not_before = at
        elif delay:
            not_before = deadline_in(delay)
        key, limit = concurrency.step_key(self.run, name)
        # The worker the step is born RUNNING under (a held-back step is born PENDING).
        claimer = None if held else claimed_by
        if key is not None and claimer is not None:
            raise ValueError(f"step {name!r} has a concurrency key: its claim decides")
        # A held-back step is notified when it is due (the sweeper), not now: a worker
        # would only drop a notification that comes early.
        extra: dict[str, Any] = {
            "notified_at": Now() if dispatch.mode() == "rq" and not held else None
        }
        if claimer is not None:
            extra = {
                "status": StepStatus.RUNNING,
                "attempt": 1,
                "owner": claimer,
                "lease_until": ExpressionWrapper(
                    Now() + timedelta(seconds=settings.AGENTOPS_LEASE_SECONDS),
                    output_field=DateTimeField(),
                ),
                "heartbeat_at": Now(),
                "started_at": Now(),
                "notified_at": None,
            }
        step = Step.objects.create(
            run_id=self.run.pk,
            name=name,
            seq=seq,
            generation=self.run.generation,
            not_before=not_before,
            concurrency_key=key,
            concurrency_limit=limit,
            **extra,
        )
        self.set_run(current_step_id=step.pk)
        scheduled: dict[str, Any] = {"name": name, "seq": seq}
        if held:
            step.refresh_from_db(fields=["not_before"])
            scheduled["not_before"] = step.not_before.isoformat()
        self.event("step.scheduled", scheduled, step_id=step.pk, actor=actor)
        if claimer is not None:
            self.event(
                "step.started",
                {"attempt": 1, "worker": claimer},
                step_id=step.pk,
                actor=claimer,
            )
        elif not held:
            dispatch.notify_on_commit(self.run.pk, step.pk)
        return step.pk

    def schedule_branches(self, parent: Step, items: list[Any], *, actor: str) -> int:
        """Insert one PENDING branch row of the map step ``parent`` per item (its
        position, ``input`` ``{"item": item}``, seqs after every step of the run), with
        one ``step.fanned_out`` event on ``parent`` and the workers notified after
        commit. Returns how many were inserted. The caller has moved ``parent`` to
        WAITING behind its fence in this transaction."""
        first = self.next_step_seq()
        rq = dispatch.mode() == "rq"
        rows = Step.objects.bulk_create(
            [
                Step(
                    run_id=self.run.pk,
                    name=parent.name,
                    seq=first + position,
                    generation=self.run.generation,
                    branch_of_id=parent.pk,
                    position=position,
                    input={"item": item},
                    notified_at=Now() if rq else None,
                )
                for position, item in enumerate(items)
            ],
            batch_size=1000,
        )
        self.event(
            "step.fanned_out",
            {"branches": len(rows), "first_seq": first, "last_seq": first + len(rows) - 1},
            step_id=parent.pk,
            actor=actor,
        )
        if rq:
            dispatch.notify_many_on_commit(self.run.pk, [row.pk for row in rows])
        return len(rows)

    def cancel_branches(
        self, parent_id: int, *, actor: str, reason: str, statuses: Iterable[str] = STEP_OPEN
    ) -> int:
        """Cancel the branches of the map step row ``parent_id`` in ``statuses`` (by
        default every open one: PENDING, RUNNING, WAITING or UNKNOWN; a running branch's
        late commit is then refused by its fence) in one UPDATE, with one
        ``step.branches_cancelled`` event on the parent. Returns how many were
        cancelled."""
        cancelled = write_state(
            Step.objects.filter(
                run_id=self.run.pk, branch_of_id=parent_id, status__in=list(statuses)
            ),
            status=StepStatus.CANCELLED,
            owner="",
            lease_until=None,
            finished_at=Now(),
        )
        if cancelled:
            self.event(
                "step.branches_cancelled",
                {"count": cancelled, "reason": reason},
                step_id=parent_id,
                actor=actor,
            )
        return cancelled

    def supersede_branches(
        self, parent_id: int, *, actor: str, first_seq: int, last_seq: int, **payload: Any
    ) -> int:
        """Supersede the branches of the map step row ``parent_id`` that are not settled
        yet (a resume from an earlier checkpoint) in one UPDATE, with one
        ``step.branches_superseded`` event on the parent: ``{"count", "first_seq",
        "last_seq", **payload}`` (the seq range the caller read under this lock).
        Returns how many were superseded."""
        superseded = write_state(
            Step.objects.filter(run_id=self.run.pk, branch_of_id=parent_id).exclude(
                status__in=(StepStatus.SUPERSEDED, StepStatus.CANCELLED)
            ),
            status=StepStatus.SUPERSEDED,
            owner="",
            lease_until=None,
        )
        if superseded:
            self.event(
                "step.branches_superseded",
                {"count": superseded, "first_seq": first_seq, "last_seq": last_seq, **payload},
                step_id=parent_id,
                actor=actor,
            )
        return superseded

    def save_checkpoint(
        self,
        step: Step,
        *,
        previous: dict[str, Any] | None,
        output: Any,
        next_name: str | None,
        actor: str,
        previous_id: int | None = None,
        base_state: dict[str, Any] | None = None,
        message_seq: int | None = None,
        refresh_usage: bool = True,
    ) -> tuple[int, dict[str, Any]]:
        """Save the ``after:<step>`` checkpoint of the locked run: ``previous`` (the whole
        state the step worked from; ``None`` reads the latest checkpoint) plus ``output``,
        stored as what changed since checkpoint ``previous_id`` (whose stored whole state
        is ``base_state``, by default ``previous``), with ``checkpoint.saved``.
        ``message_seq`` defaults to the thread's current one. Returns the new
        checkpoint's id and whole state."""
        if previous is None:
            previous_id, previous = checkpoints.latest(self.run)
        if base_state is None:
            base_state = previous
        if message_seq is None:
            message_seq = allocate_message_seqs(self.run.thread_id, 0)[1]
        state = checkpoints.next_state(
            previous,
            run=self.run,
            step=step,
            output=output,
            next_name=next_name,
            message_seq=message_seq,
            refresh_usage=refresh_usage,
        )
        saved = checkpoints.store(
            self.run, step, f"after:{step.name}", state, base_id=previous_id, previous=base_state
        )
        self.event("checkpoint.saved", {"name": f"after:{step.name}"}, step_id=step.pk, actor=actor)
        return saved.pk, state

    def advance(
        self,
        step: Step,
        *,
        output: Any,
        next_name: str | None,
        actor: str,
        previous: dict[str, Any] | None = None,
        previous_id: int | None = None,
        base_state: dict[str, Any] | None = None,
        message_seq: int | None = None,
        refresh_usage: bool = True,
        reason: str = "",
        next_seq: int | None = None,
        claimed_by: str | None = None,
        delay: float = 0.0,
        at: datetime | None = None,
    ) -> "Advanced":
        """After ``step`` succeeded: save its checkpoint, then schedule ``next_name`` or
        finish the run (SUCCEEDED) when it is ``None``. A waiting or paused run goes
        RUNNING first (``reason``); a cancel-requested run stops after the checkpoint.
        ``next_seq`` (default ``next_step_seq()``), ``claimed_by`` and a timer
        (``delay`` seconds or ``at`` an instant) go to ``schedule_step``; ``previous``,
        ``previous_id`` and ``base_state`` go to ``save_checkpoint``.
        Returns ``Advanced``."""
        checkpoint_id, state = self.save_checkpoint(
            step,
            previous=previous,
            previous_id=previous_id,
            base_state=base_state,
            output=output,
            next_name=next_name,
            actor=actor,
            message_seq=message_seq,
            refresh_usage=refresh_usage,
        )
        if self.run.status == RunStatus.CANCEL_REQUESTED:
            return Advanced(None, None, checkpoint_id, state)
        if self.run.status != RunStatus.RUNNING:
            self.transition_run(RunStatus.RUNNING, actor=actor, reason=reason)
        if next_name is None:
            self.transition_run(
                RunStatus.SUCCEEDED, actor=actor, finished_at=Now(), current_step=None
            )
            return Advanced(None, None, checkpoint_id, state)
        seq = self.next_step_seq() if next_seq is None else next_seq
        if self.run.pause_requested_at is not None:
            # Pausing: the next step waits PENDING (held) instead of continuing.
            claimed_by = None
        step_id = self.schedule_step(
            next_name, actor=actor, seq=seq, claimed_by=claimed_by, delay=delay, at=at
        )
        return Advanced(step_id, seq, checkpoint_id, state)

    def resolve_takeover(
        self, actor: str, note: dict[str, Any], takeover=None, *, record: bool = True, **match
    ):
        """Mark the run's OPEN takeover (or ``takeover``, optionally further filtered by
        ``match``, e.g. ``cause=``) RESOLVED with ``note`` (``{"action", "reason",
        "evidence", ...}``) and, with ``record``, a ``takeover.resolved`` event. Returns
        the takeover, or ``None`` when none was open."""
        query = Takeover.objects.filter(run_id=self.run.pk, status=Takeover.Status.OPEN, **match)
        if takeover is not None:
            query = query.filter(pk=takeover.pk)
        current = query.first()
        if current is None:
            return None
        write_state(
            Takeover.objects.filter(pk=current.pk, status=Takeover.Status.OPEN),
            status=Takeover.Status.RESOLVED,
            resolution=note.get("action", ""),
            resolution_note=note.get("reason", ""),
            resolved_by=actor,
            resolved_at=Now(),
        )
        if record:
            self.event(
                "takeover.resolved",
                {"takeover_id": current.pk, **note},
                step_id=current.step_id,
                actor=actor,
            )
        return current

    def decide_approval(
        self,
        approval_id: int,
        target: str,
        *,
        actor: str,
        payload: dict[str, Any],
        step_id: int | None = None,
        only_if: Q | None = None,
        **fields: Any,
    ) -> bool:
        """Move the PENDING approval ``approval_id`` of this run to ``target``
        (APPROVED, REJECTED, EXPIRED or CANCELLED) with ``fields`` (decided_by,
        decided_at, comment) and an ``approval.<target>`` event; ``only_if`` adds a
        condition. Returns ``False`` when it was no longer PENDING."""
        query = Approval.objects.filter(
            pk=approval_id, run_id=self.run.pk, status=Approval.Status.PENDING
        )
        if only_if is not None:
            query = query.filter(only_if)
        if write_state(query, status=target, **fields) != 1:
            return False
        self.event(f"approval.{target.lower()}", payload, step_id=step_id, actor=actor)
        return True

    def cancel_pending_approvals(
        self,
        *,
        actor: str,
        reason: str,
        comment: str,
        step_ids: "Iterable[int] | QuerySet | None" = None,
    ) -> list[int]:
        """Cancel the run's PENDING approvals (only those of ``step_ids``, ids or a
        queryset of step ids, when given), each with an ``approval.cancelled`` event.
        Returns their ids."""
        query = Approval.objects.filter(run_id=self.run.pk, status=Approval.Status.PENDING)
        if step_ids is not None:
            query = query.filter(step_id__in=step_ids)
        cancelled = []
        for approval_id, step_id in query.values_list("pk", "step_id"):
            if self.decide_approval(
                approval_id,
                Approval.Status.CANCELLED,
                actor=actor,
                payload={"approval_id": approval_id, "reason": reason},
                step_id=step_id,
                decided_at=Now(),
                comment=comment,
            ):
                cancelled.append(approval_id)
        return cancelled

    def set_compensation(self, target: str, **fields: Any) -> None:
        """Move the run's compensation status to ``target`` per
        ``runs.states.COMPENSATION_TRANSITIONS``, with plain ``fields`` (``compensation``).
        Raises ``IllegalTransition`` for a move the table forbids."""
        source = self.run.compensation_status
        if not compensation_can(source, target):
            raise IllegalTransition("compensation", source, target)
        write_state(
            Run.objects.filter(pk=self.run.pk, compensation_status=source),
            compensation_status=target,
            **fields,
        )
        self.run.compensation_status = target

    def request_pause(self, request: dict[str, Any], *, actor: str, running: int) -> None:
        """Mark the locked run pause-requested with ``request`` (``{"reason", "actor"}``,
        optionally ``"resume"``), with a ``run.pause_requested`` event naming the
        ``running`` steps it waits for. Until ``clear_pause_request`` no step of the run
        is claimed and a commit schedules its next step without continuing it."""
        self.run.pause_requested_at = db_time = Now()
        self.run.pause_request = request
        self.set_run(pause_requested_at=db_time, pause_request=request)
        self.event(
            "run.pause_requested",
            {"reason": request.get("reason", ""), "running": running},
            actor=actor,
        )

    def clear_pause_request(self) -> dict[str, Any]:
        """Clear the locked run's pause request (it was carried out or overtaken);
        returns the request as it was."""
        request = dict(self.run.pause_request or {})
        self.run.pause_requested_at = None
        self.run.pause_request = {}
        self.set_run(pause_requested_at=None, pause_request={})
        return request

    def start_generation(self, **fields: Any) -> int:
        """Bump the locked run's generation (a resume from an earlier checkpoint) with
        plain ``fields``; returns the new generation."""
        generation = self.run.generation + 1
        write_state(Run.objects.filter(pk=self.run.pk), generation=generation, **fields)
        self.run.generation = generation
        return generation


@contextmanager
def run_transaction(run_id) -> Iterator[RunTx]:
    """Open a transaction, lock the run row, yield a ``RunTx``, write its events, commit.

    Raises ``Run.DoesNotExist`` if the run is gone. An exception inside the block rolls
    everything back, events included.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        tx = RunTx(run)
        for hook in RUN_LOCKED_HOOKS.values():
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


def allocate_message_seqs(thread_id: int, count: int) -> tuple[int, int]:
    """Reserve ``count`` gap-free message seqs of the thread in one statement (the
    thread row stays locked until the caller's transaction ends); returns ``(first,
    last)``. ``count=0`` reserves nothing and returns the current last seq as both."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_thread SET message_seq = message_seq + %s "
            "WHERE id = %s RETURNING message_seq",
            [count, thread_id],
        )
        last = cursor.fetchone()[0]
    return last - count + 1, last


def _held(step_id: int, attempt: int):
    """The step row, locked, when ``attempt`` still holds it: RUNNING at that attempt,
    its lease not run out on the database clock (fail closed)."""
    return Step.objects.select_for_update().filter(
        pk=step_id, attempt=attempt, status=StepStatus.RUNNING, lease_until__gt=Now()
    )


def attempt_holds(step_id: int, attempt: int) -> bool:
    """Inside a transaction: lock the step row and tell whether ``attempt`` still holds
    it (RUNNING at that attempt). The lock keeps a reclaim from moving the step before
    the caller's transaction ends, so a row inserted under the check cannot go stale.
    The lease must not have run out on the database clock either (fail closed)."""
    return _held(step_id, attempt).values_list("pk", flat=True).first() is not None


def attempt_holds_operation(step_id: int, attempt: int, key: str) -> tuple[bool, int | None]:
    """``attempt_holds`` (the step row locked likewise) and, in the same statement, the
    id of the ledger row of idempotency key ``key`` (``None`` when there is none):
    ``(holds, operation id)``. A ledger write checks both before its intent; one round
    trip instead of two."""
    row = (
        _held(step_id, attempt)
        .annotate(op_id=Subquery(Operation.objects.filter(idempotency_key=key).values("pk")[:1]))
        .values_list("op_id", flat=True)
    )
    found = list(row)
    return (True, found[0]) if found else (False, None)


def transition_operation(op: Operation, target: str, *, expected=None, **fields: Any) -> bool:
    """Move the ledger row ``op`` to ``target`` with ``fields`` (result, attempt,
    arguments, ...) and ``updated_at``; ``expected`` (a status or statuses) makes it
    conditional. Updates ``op`` in place and returns ``True`` when the row moved."""
    query = Operation.objects.filter(pk=op.pk)
    if expected is not None:
        query = query.filter(status__in=[expected] if isinstance(expected, str) else expected)
    if write_state(query, status=target, updated_at=Now(), **fields) != 1:
        return False
    op.status = target
    for name, value in fields.items():
        setattr(op, name, value)
    return True


def transition_operations(query, target: str, **fields: Any) -> int:
    """Move every ledger row of ``query`` (an ``Operation`` queryset) to ``target``;
    returns how many moved."""
    return write_state(query, status=target, updated_at=Now(), **fields)


__all__ = [
    "EventSpec",
    "RunTx",
    "allocate_message_seqs",
    "attempt_holds",
    "attempt_holds_operation",
    "transition_operation",
    "transition_operations",
    "run_transaction",
    "record_event",
    "transition_run",
    "RunStatus",
    "StepStatus",
]
