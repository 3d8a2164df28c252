"""Executing one step (DESIGN section 5): read, claim, run outside any transaction with
a heartbeat, then commit the result, messages, checkpoint, events and the next step in
one short transaction fenced by the attempt."""

import logging
import os
import sys
import threading
from datetime import timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import DatabaseError, IntegrityError, close_old_connections, connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F
from django.db.models.functions import Now

from runs.engine.control import versions
from runs.engine.control.takeovers import open_takeover
from runs.engine.data import drafts
from runs.engine.data.artifacts import ArtifactInvalid, pause_for_invalid_artifact
from runs.engine.effects import budget, compensation, unknown_outcomes
from runs.engine.errors import CancelRequested, LeaseLost, OutcomeUnknown, StepError
from runs.engine.execution import dispatch
from runs.engine.execution.identity import WorkerIdentity
from runs.engine.execution.step_context import StepContext
from runs.engine.state import db_faults, leases, reconnect, values
from runs.engine.state.checkpoints import next_state
from runs.engine.state.clock import db_now
from runs.engine.state.gateway import RunTx, run_transaction
from runs.models import Checkpoint, Message, Run, Step, Summary, Thread
from runs.states import RUN_EXECUTABLE, RUN_TERMINAL, RunStatus, StepStatus
from runs.workflows.definition import StepDef, Workflow

logger = logging.getLogger("agentops.executor")

#: Exit code of an injected crash (``runs start --crash-before``), as in the demo.
CRASH_EXIT_CODE = 75


def say(line: str) -> None:
    """Progress line on the worker's stdout (``ENTER <step>``), flushed at once."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run_chain(step_id: int | None, worker: WorkerIdentity) -> int:
    """Execute ``step_id`` and then each next step this worker committed itself, until
    none is left or the worker is stopping. Returns the number of steps executed.

    A worker that just committed step k claims step k+1 through the same database claim
    (DESIGN section 11): the queued notification for it then finds it taken.
    """
    executed = 0
    while step_id is not None:
        outcome = execute_step(step_id, worker)
        if not outcome.claimed:
            break
        executed += 1
        worker.executed += 1
        if outcome.next_step_id is None:
            _finish_cancel_if_requested(step_id, worker)
        if worker.stopping.is_set():
            break
        step_id = outcome.next_step_id
    return executed


def _finish_cancel_if_requested(step_id: int, worker: WorkerIdentity) -> None:
    """A chain ended (the step stopped, failed, waits or was the last): if its run is
    cancel-requested, this worker completes the cancel flow right away instead of
    leaving it to the sweeper (one query when not)."""
    run_id = (
        Step.objects.filter(pk=step_id, run__status=RunStatus.CANCEL_REQUESTED)
        .values_list("run_id", flat=True)
        .first()
    )
    if run_id is not None:
        from runs.engine.control.cancel import finish_cancel

        finish_cancel(run_id, actor=worker.worker_id)


class StepOutcome(NamedTuple):
    """``claimed``: this worker claimed (and ran) the step; ``next_step_id``: the step
    its commit scheduled, for chaining."""

    claimed: bool
    next_step_id: int | None = None


NOT_CLAIMED = StepOutcome(False)


def execute_step(step_id: int, worker: WorkerIdentity) -> StepOutcome:
    """Run one step if it is claimable.

    Never raises for step failures (they are recorded); database errors propagate.
    """
    close_old_connections()
    step = Step.objects.select_related("run").filter(pk=step_id).first()
    if step is None:
        return NOT_CLAIMED
    run = step.run
    if run.status not in RUN_EXECUTABLE or step.generation != run.generation:
        return NOT_CLAIMED
    if step.status not in (StepStatus.PENDING, StepStatus.RUNNING):
        return NOT_CLAIMED
    workflow = versions.workflow_for(run, step, worker.worker_id)
    if workflow is None:
        return NOT_CLAIMED
    _maybe_crash_before(run, step)

    claimed = _claim(run, step, worker)
    if claimed is None:
        return NOT_CLAIMED
    attempt, state = claimed
    step_def = workflow.get(step.name)
    say(f"ENTER {step.name} (run {run.pk}, attempt {attempt}, worker {worker.worker_id})")
    if attempt - step.attempt_base > step_def.retry.max_attempts:
        # Each claim is an attempt, including claims whose worker died; a step that keeps
        # killing its workers must stop being retried. Attempts before the last human
        # decision (attempt_base) do not count.
        _fail_attempt(
            run,
            step,
            attempt,
            worker,
            step_def,
            StepError(
                "ATTEMPTS_EXHAUSTED",
                f"claimed {attempt - step.attempt_base} times, "
                f"max_attempts={step_def.retry.max_attempts}",
            ),
            force_final=True,
        )
        return StepOutcome(True)

    ctx = StepContext(
        run=run,
        step=step,
        attempt=attempt,
        worker_id=worker.worker_id,
        workflow=workflow,
        step_def=step_def,
        state=state,
    )
    heartbeat = Heartbeat(ctx)
    heartbeat.start()
    try:
        output = step_def.fn(ctx)
    except LeaseLost as exc:
        _record(run.pk, "step.abandoned", {"attempt": attempt, "reason": str(exc)}, step, worker)
        return StepOutcome(True)
    except CancelRequested:
        _release_for_cancel(run, step, attempt, worker)
        return StepOutcome(True)
    except ArtifactInvalid as exc:
        pause_for_invalid_artifact(run, step, attempt, worker.worker_id, exc)
        return StepOutcome(True)
    except OutcomeUnknown as exc:
        unknown_outcomes.pause_unknown(run, step, attempt, worker.worker_id, exc)
        return StepOutcome(True)
    except budget.BudgetExhausted as exc:
        _budget_exhausted(run, step, attempt, worker, workflow, step_def, exc)
        return StepOutcome(True)
    except StepError as exc:
        _fail_attempt(run, step, attempt, worker, step_def, exc)
        return StepOutcome(True)
    except Exception as exc:  # noqa: BLE001 - a bug in a step is recorded, not fatal to the worker
        if db_faults.classify(exc) is not None:
            _release_after_db_fault(run, step, attempt, worker, exc)
            return StepOutcome(True)
        logger.exception("step %s raised", step.name)
        _fail_attempt(
            run,
            step,
            attempt,
            worker,
            step_def,
            StepError("INTERNAL", f"{type(exc).__name__}: {exc}"),
        )
        return StepOutcome(True)
    finally:
        heartbeat.stop()
    if step_def.kind == "approval":
        from approvals.services import commit_approval_request

        commit_approval_request(ctx, output or {}, worker.worker_id)
        return StepOutcome(True)
    return StepOutcome(True, _commit_checked(ctx, output, worker, step_def))


def _commit_checked(ctx: StepContext, output: Any, worker: WorkerIdentity, step_def: StepDef):
    """Check every value the commit writes (``runs.engine.state.values``), then commit,
    retrying the whole fenced transaction after a lost connection or a lock timeout (the
    fence makes a repeat safe; a lost commit is not a failed attempt). A value that
    cannot be stored fails the attempt with ``INVALID_OUTPUT``. Returns the next step's
    id, if any."""
    try:
        output = values.storable(output, "output")
        ctx.new_messages = [_checked_message(m) for m in ctx.new_messages]
    except values.InvalidValue as exc:
        _fail_attempt(ctx.run, ctx.step, ctx.attempt, worker, step_def, exc)
        return None
    return _retrying(
        ctx.run.pk,
        ctx.step,
        ctx.attempt,
        worker,
        lambda: _commit_success(ctx, output, worker),
        "commit",
    )


def _checked_message(message: dict) -> dict:
    return {
        **message,
        "content": values.storable(message["content"], "message content"),
        "tool_calls": values.storable(message["tool_calls"], "message tool calls"),
    }


def _retrying(run_id, step: Step, attempt: int, worker: WorkerIdentity, fn, what: str):
    """``fn()`` (one fenced transaction) through ``reconnect.retry_transaction`` for up to
    one lease length; the faults it got past are recorded as one ``db.connection_lost``
    event (after the fact: the event could not be written while the database was away)."""
    faults: list[str] = []

    def tracked(seen: list[str]):
        faults[:] = seen
        return fn()

    result = reconnect.retry_transaction(
        tracked,
        deadline=settings.AGENTOPS_LEASE_SECONDS,
        what=f"{what} of step {step.pk} attempt {attempt}",
    )
    if faults:
        _record(
            run_id,
            "db.connection_lost",
            {"attempt": attempt, "during": what, "retries": len(faults), "errors": faults[-3:]},
            step,
            worker,
        )
    return result


# -- claim -----------------------------------------------------------------------------


def _claim(run: Run, step: Step, worker: WorkerIdentity) -> tuple[int, dict] | None:
    """Claim the step and mark the run RUNNING in one transaction; returns the attempt
    and the state of the run's latest checkpoint."""
    with run_transaction(run.pk) as tx:
        if tx.run.status not in RUN_EXECUTABLE or tx.run.generation != step.generation:
            return None
        attempt = leases.claim_step(step.pk, worker.worker_id, settings.AGENTOPS_LEASE_SECONDS)
        if attempt is None:
            return None
        if tx.run.status == RunStatus.PENDING:
            tx.transition_run(RunStatus.RUNNING, actor=worker.worker_id, started_at=Now())
        tx.set_run(current_step_id=step.pk)
        payload = {"attempt": attempt, "worker": worker.worker_id}
        if step.status == StepStatus.RUNNING:
            payload["takeover_from"] = step.owner
        tx.event("step.started", payload, step_id=step.pk, actor=worker.worker_id)
        checkpoint = (
            Checkpoint.objects.filter(run_id=run.pk, generation=tx.run.generation)
            .order_by("-pk")
            .first()
        )
        state = checkpoint.state if checkpoint else {}
    run.status = tx.run.status
    return attempt, state


class Heartbeat:
    """Renews the lease every third of its length while the step runs, and raises the
    context's flags when the lease is lost or the run is asked to cancel."""

    def __init__(self, ctx: StepContext):
        self.ctx = ctx
        self.ttl = settings.AGENTOPS_LEASE_SECONDS
        self.interval = max(0.05, self.ttl / 3)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)

    def _loop(self) -> None:
        ctx = self.ctx
        try:
            while not self._stop.wait(self.interval):
                try:
                    if not leases.renew_lease(ctx.step.pk, ctx.attempt, self.ttl):
                        ctx.lease_lost.set()
                        return
                    ctx.lease_renewed()
                    status = (
                        Run.objects.filter(pk=ctx.run.pk).values_list("status", flat=True).first()
                    )
                except Exception:  # noqa: BLE001 - keep trying; the step stops itself in time (fail closed)
                    logger.warning("heartbeat failed for step %s", ctx.step.pk, exc_info=True)
                    connection.close()
                    continue
                if status == RunStatus.CANCEL_REQUESTED or status in RUN_TERMINAL:
                    ctx.cancel_requested.set()
        finally:
            connection.close()


# -- commit ----------------------------------------------------------------------------


def _commit_success(ctx: StepContext, output: Any, worker: WorkerIdentity) -> int | None:
    """Commit the result, fenced by attempt. Returns the next step's id, if any."""
    run, step, attempt = ctx.run, ctx.step, ctx.attempt
    next_name = ctx.next_step if ctx.goto_set else ctx.workflow.next_after(step.name)
    next_step_id = None
    with run_transaction(run.pk) as tx:
        # The fence is the UPDATE's WHERE clause (attempt and RUNNING); the reason for a
        # refusal is only looked up when it matched nothing, saving a read per step.
        committed = (
            tx.run.status not in RUN_TERMINAL
            and tx.run.generation == step.generation
            # The lease must not have run out on the database clock either.
            and Step.objects.filter(
                pk=step.pk, attempt=attempt, status=StepStatus.RUNNING, lease_until__gt=Now()
            ).update(
                status=StepStatus.SUCCEEDED,
                output=output,
                finished_at=Now(),
                lease_until=None,
                owner=worker.worker_id,
                error_code="",
                error_detail="",
            )
            == 1
        )
        if not committed:
            tx.event(
                "step.commit_rejected",
                {
                    "attempt": attempt,
                    "reason": _commit_rejection(tx, step, attempt),
                    "worker": worker.worker_id,
                },
                step_id=step.pk,
                actor=worker.worker_id,
                progress=False,
            )
            return None
        tx.event(
            "step.succeeded",
            {"attempt": attempt, "worker": worker.worker_id},
            step_id=step.pk,
            actor=worker.worker_id,
        )
        message_seq = _write_messages(tx, ctx, worker)
        _write_summaries(tx, ctx, worker)
        # tx.run is the row locked at the start of this transaction, after all of the
        # step's budget charges: its usage counters are current without a re-read.
        state = next_state(
            ctx.state,
            run=tx.run,
            step=step,
            output=output,
            next_name=next_name,
            message_seq=message_seq,
            refresh_usage=False,
        )
        Checkpoint.objects.create(
            run_id=run.pk,
            step_id=step.pk,
            name=f"after:{step.name}",
            generation=tx.run.generation,
            state=state,
        )
        tx.event(
            "checkpoint.saved",
            {"name": f"after:{step.name}"},
            step_id=step.pk,
            actor=worker.worker_id,
        )
        if tx.run.status == RunStatus.CANCEL_REQUESTED:
            return None
        if next_name is None:
            tx.transition_run(
                RunStatus.SUCCEEDED, actor=worker.worker_id, finished_at=Now(), current_step=None
            )
            return None
        next_step_id = schedule_step(tx, next_name, seq=step.seq + 1, actor=worker.worker_id)
    return next_step_id


def _commit_rejection(tx: RunTx, step: Step, attempt: int) -> str | None:
    """Why a fenced commit must not apply, or ``None`` if it may."""
    current = Step.objects.filter(pk=step.pk).values_list("status", "attempt").first()
    if current is None:
        return "step is gone"
    status, current_attempt = current
    if current_attempt != attempt:
        return f"stale attempt {attempt}; attempt {current_attempt} holds the step"
    if (
        status == StepStatus.RUNNING
        and not Step.objects.filter(pk=step.pk, lease_until__gt=Now()).exists()
    ):
        return f"the lease of attempt {attempt} ran out"
    if tx.run.status in RUN_TERMINAL:
        return f"run is {tx.run.status}"
    if tx.run.generation != step.generation:
        return "step belongs to a superseded generation"
    if status != StepStatus.RUNNING:
        return f"step is {status}"
    return None


def _write_messages(tx: RunTx, ctx: StepContext, worker: WorkerIdentity) -> int:
    """Insert the step's staged messages with gap-free thread seqs; returns the thread's
    last message seq after the insert."""
    thread_id = ctx.run.thread_id
    # Streamed drafts already hold a seq: they only become final here.
    for m in ctx.new_messages:
        if m.get("draft"):
            drafts.finalize(tx, step_id=ctx.step.pk, message=m, actor=worker.worker_id)
    staged = [m for m in ctx.new_messages if not m.get("draft")]
    count = len(staged)
    if count:
        # One round trip to allocate the seqs and learn the last one.
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE runs_thread SET message_seq = message_seq + %s "
                "WHERE id = %s RETURNING message_seq",
                [count, thread_id],
            )
            last = cursor.fetchone()[0]
    else:
        last = Thread.objects.filter(pk=thread_id).values_list("message_seq", flat=True).get()
    first = last - count + 1
    rows = [
        Message(
            thread_id=thread_id,
            run_id=ctx.run.pk,
            step_id=ctx.step.pk,
            seq=first + i,
            message_id=m["id"],
            role=m["role"],
            content=m["content"],
            tool_calls=m["tool_calls"],
            tool_call_id=m["tool_call_id"] or "",
        )
        for i, m in enumerate(staged)
    ]
    Message.objects.bulk_create(rows)
    for row in rows:
        tx.event(
            "message.created",
            {"message_id": row.message_id, "role": row.role, "seq": row.seq},
            step_id=ctx.step.pk,
            actor=worker.worker_id,
        )
    return last


def _write_summaries(tx: RunTx, ctx: StepContext, worker: WorkerIdentity) -> None:
    """Insert the step's staged summaries (``StepContext.add_summary``). A summary of
    the same range committed meanwhile by another run of the thread is kept instead."""
    for s in ctx.new_summaries:
        try:
            with transaction.atomic():
                summary = Summary.objects.create(
                    thread_id=ctx.run.thread_id, run_id=ctx.run.pk, step_id=ctx.step.pk, **s
                )
        except IntegrityError:
            continue
        tx.event(
            "summary.created",
            {
                "summary_id": summary.pk,
                "covers": [s["first_seq"], s["last_seq"]],
                "tokens": s["tokens"],
            },
            step_id=ctx.step.pk,
            actor=worker.worker_id,
        )


def schedule_step(tx: RunTx, name: str, *, seq: int, actor: str, delay: float = 0.0) -> int:
    """Create the PENDING step ``name`` in the locked run's current generation and
    notify workers after commit. Returns the new step's id."""
    not_before = (
        Now()
        if not delay
        else ExpressionWrapper(Now() + timedelta(seconds=delay), output_field=DateTimeField())
    )
    step = Step.objects.create(
        run_id=tx.run.pk,
        name=name,
        seq=seq,
        generation=tx.run.generation,
        not_before=not_before,
        notified_at=Now() if dispatch.mode() == "rq" else None,
    )
    tx.set_run(current_step_id=step.pk)
    tx.event("step.scheduled", {"name": name, "seq": seq}, step_id=step.pk, actor=actor)
    dispatch.notify_on_commit(tx.run.pk, step.pk)
    return step.pk


# -- failures --------------------------------------------------------------------------


def _fail_attempt(
    run: Run,
    step: Step,
    attempt: int,
    worker: WorkerIdentity,
    step_def: StepDef,
    error: StepError,
    force_final: bool = False,
) -> None:
    """Record a failed attempt: schedule a retry with backoff, or give up as the step's
    policy says (fail the run and compensate, or pause it for a takeover)."""
    _retrying(
        run.pk,
        step,
        attempt,
        worker,
        lambda: _record_failed_attempt(run, step, attempt, worker, step_def, error, force_final),
        "failure record",
    )


def _record_failed_attempt(
    run: Run,
    step: Step,
    attempt: int,
    worker: WorkerIdentity,
    step_def: StepDef,
    error: StepError,
    force_final: bool,
) -> None:
    """The body of ``_fail_attempt``: read the clock, decide, write (one transaction)."""
    started = Step.objects.filter(pk=step.pk).values_list("started_at", flat=True).first()
    now = db_now()
    elapsed = (now - started).total_seconds() if started else 0.0
    decision = step_def.retry.decide(
        attempt - step.attempt_base,
        error.code,
        elapsed,
        retry_after=error.retry_after,
    )
    # Exception text is untrusted: NUL and lone surrogates would make the write fail.
    error.detail = values.storable_text(error.detail)
    with run_transaction(run.pk) as tx:
        rejected = _commit_rejection(tx, step, attempt)
        if rejected:
            tx.event(
                "step.commit_rejected",
                {"attempt": attempt, "reason": rejected, "error_code": error.code},
                step_id=step.pk,
                actor=worker.worker_id,
                progress=False,
            )
            return
        common = {
            "owner": "",
            "lease_until": None,
            "error_code": error.code,
            "error_detail": error.detail[:4000],
        }
        payload = {"attempt": attempt, "error_code": error.code, "error_detail": error.detail[:500]}
        if decision.retry and not force_final and tx.run.status != RunStatus.CANCEL_REQUESTED:
            # not_before is computed once from the database clock read above, so the event
            # says exactly when the next attempt may start.
            not_before = now + timedelta(seconds=decision.delay)
            tx.transition_step(
                step.pk,
                StepStatus.PENDING,
                expected=StepStatus.RUNNING,
                attempt=attempt,
                actor=worker.worker_id,
                event_type="step.retry_scheduled",
                payload={
                    **payload,
                    "delay_s": decision.delay,
                    "retry_after_s": decision.retry_after,
                    "failed_at": now.isoformat(),
                    "not_before": not_before.isoformat(),
                },
                not_before=not_before,
                **common,
            )
            # The sweeper notifies when not_before passes (notified_at < not_before).
            return
        tx.transition_step(
            step.pk,
            StepStatus.FAILED,
            expected=StepStatus.RUNNING,
            attempt=attempt,
            actor=worker.worker_id,
            payload={**payload, "reason": decision.reason},
            finished_at=Now(),
            **common,
        )
        if tx.run.status == RunStatus.CANCEL_REQUESTED:
            return
        if (step_def.on_exhausted == "takeover" or error.takeover) and not isinstance(
            error, budget.BudgetExhausted
        ):
            open_takeover(
                tx,
                cause="retries_exhausted",
                reason=f"{step.name} failed: {error.code} ({decision.reason})",
                actor=worker.worker_id,
                step=step,
                suggested_action="Check the dependency, then retry the step.",
                evidence={"error_code": error.code, "error_detail": error.detail[:2000]},
            )
        else:
            tx.transition_run(
                RunStatus.FAILED,
                actor=worker.worker_id,
                reason=f"{step.name}: {error.code}",
                finished_at=Now(),
                error_code=error.code,
                error_detail=error.detail[:4000],
            )
            compensation.schedule(
                tx, actor=worker.worker_id, reason=f"run failed at {step.name}: {error.code}"
            )


def _budget_exhausted(
    run: Run,
    step: Step,
    attempt: int,
    worker: WorkerIdentity,
    workflow: Workflow,
    step_def: StepDef,
    error,
) -> None:
    """The next call would pass the run's budget (it was not made): fail the run where
    the workflow says so, else pause it for a human to raise the budget."""
    if workflow.on_budget_exhausted == "fail":
        _fail_attempt(run, step, attempt, worker, step_def, error, force_final=True)
    else:
        budget.pause_exhausted(run, step, attempt, worker.worker_id, error)


def _release_after_db_fault(
    run: Run, step: Step, attempt: int, worker: WorkerIdentity, exc: Exception
) -> None:
    """The step lost its database connection (server restart, terminated session) or
    waited past a lock timeout while it ran: an infrastructure fault, not a step
    failure. Reconnect, then give the step back (PENDING, due now, fenced by the
    attempt) without counting the attempt, with a ``step.released`` event naming the
    fault. If even that cannot be written, the lease decides."""
    detail = values.storable_text(f"{type(exc).__name__}: {exc}")[:2000]
    logger.warning("step %s lost the database (%s); giving it back", step.pk, detail)
    connection.close()

    def release() -> None:
        with run_transaction(run.pk) as tx:
            tx.transition_step(
                step.pk,
                StepStatus.PENDING,
                expected=StepStatus.RUNNING,
                attempt=attempt,
                actor=worker.worker_id,
                event_type="step.released",
                payload={"attempt": attempt, "reason": "database fault", "error": detail},
                progress=False,
                owner="",
                lease_until=None,
                not_before=Now(),
                # Not a failed attempt: it does not count against max_attempts.
                attempt_base=F("attempt_base") + 1,
            )
            dispatch.notify_on_commit(run.pk, step.pk)

    try:
        _retrying(run.pk, step, attempt, worker, release, "release")
    except DatabaseError:
        logger.warning("step %s: release failed; its lease will expire", step.pk, exc_info=True)


def _release_for_cancel(run: Run, step: Step, attempt: int, worker: WorkerIdentity) -> None:
    """The step stopped at a safe point because the run is cancel-requested: mark it
    CANCELLED (fenced), releasing the lease."""
    with run_transaction(run.pk) as tx:
        tx.transition_step(
            step.pk,
            StepStatus.CANCELLED,
            expected=StepStatus.RUNNING,
            attempt=attempt,
            actor=worker.worker_id,
            payload={"attempt": attempt, "reason": "cancel requested"},
            owner="",
            lease_until=None,
            finished_at=Now(),
        )


def _maybe_crash_before(run: Run, step: Step) -> None:
    """Fault injection (``runs start --crash-before STEP``): consume the one-shot fault,
    record it, then die at once without any cleanup, as a killed worker would."""
    if run.faults.get("crash_before") != step.name:
        return
    with run_transaction(run.pk) as tx:
        faults = dict(tx.run.faults)
        if faults.pop("crash_before", None) != step.name:
            return
        Run.objects.filter(pk=run.pk).update(faults=faults)
        tx.event(
            "fault.injected",
            {"fault": "crash_before", "step": step.name, "pid": os.getpid()},
            step_id=step.pk,
            progress=False,
        )
    say(f"CRASH before {step.name}, exit={CRASH_EXIT_CODE} (no cleanup)")
    os._exit(CRASH_EXIT_CODE)


def _record(run_id, type: str, payload: dict, step: Step, worker: WorkerIdentity) -> None:
    with run_transaction(run_id) as tx:
        tx.event(type, payload, step_id=step.pk, actor=worker.worker_id, progress=False)
