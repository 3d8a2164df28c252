"""Executing one step: read, claim, run outside any transaction with
a heartbeat, then commit the result, messages, checkpoint, events and the next step in
one short transaction fenced by the attempt."""

import logging
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.db.models import Q
from django.db.models.functions import Now

from agentops.db_pool import release_connection
from runs.engine import hooks
from runs.engine.control import approvals, branches, children, versions, waits
from runs.engine.control.cancel import finish_cancel
from runs.engine.control.takeovers import open_takeover
from runs.engine.data.artifacts import ArtifactInvalid, pause_for_invalid_artifact
from runs.engine.effects import budget, compensation, ledger, rate_limits, unknown_outcomes
from runs.engine.effects.retry import DEFAULT_RETRY, suggested_action
from runs.engine.errors import CancelRequested, LeaseLost, OutcomeUnknown, StepError, StepUnknown
from runs.engine.execution import attempt_logs, heartbeat
from runs.engine.execution.identity import WorkerIdentity
from runs.engine.execution.progress import say
from runs.engine.execution.step_context import StepContext
from runs.engine.state import checkpoints, db_faults, leases, reconnect, values
from runs.engine.state.clock import db_now
from runs.engine.state.gateway import run_transaction
from runs.engine.state.step_writes import insert_messages, write_messages
from runs.engine.state.store import store
from runs.engine.state.store_interface import (
    ATTEMPT,
    CLAIMED,
    PREPARE,
    Claim,
    Due,
    StepCommit,
)
from runs.models import Run, Step
from runs.states import RUN_TERMINAL, RunStatus, StepStatus
from runs.workflows import registry
from runs.workflows.definition import StepDef, Workflow

logger = logging.getLogger("agentops.executor")

#: Error code of an attempt whose step's code raised ``SystemExit`` (``sys.exit()``) or
#: ``KeyboardInterrupt``.
STEP_EXITED = "STEP_EXITED"


def run_chain(step_id: int | None, worker: WorkerIdentity, claimed: Step | None = None) -> int:
    """Execute ``step_id`` and then each next step this worker committed itself, until
    none is left or the worker is stopping. Returns the number of steps executed.
    ``claimed``: the step already claimed for this worker (``Store.claim_due``), run without
    a claim of its own.

    The commit of step k inserts step k+1 already claimed by this worker, so the chain
    continues without a claim and without a queue notification; a worker that stops with
    such a step gives its lease back and notifies (``leases.release_lease``).
    """
    executed = 0
    if claimed is not None:
        outcome = execute_claimed(claimed, worker)
    else:
        outcome = execute_step(step_id, worker, chain=True) if step_id is not None else NOT_CLAIMED
    last = NOT_CLAIMED
    while outcome.claimed:
        executed += 1
        worker.count_executed()
        last = outcome
        link = outcome.continued
        if link is None:
            if outcome.next_step_id is None or worker.stopping.is_set():
                break
            # The next step may not be claimable (a pause holds it): then the chain
            # ends here, and the request is finished below.
            outcome = execute_step(outcome.next_step_id, worker, chain=True)
            continue
        if worker.stopping.is_set():
            _give_back(link, worker)
            return executed
        outcome = continue_step(link, worker)
    # A run this chain finished cannot be cancel- or pause-requested any more.
    if last.step_id is not None and not last.finished and last.continued is None:
        _finish_request_if_any(last.step_id, worker)
    return executed


def _finish_request_if_any(step_id: int, worker: WorkerIdentity) -> None:
    """A chain ended (the step stopped, failed, waits, was the last, or its next step
    is held): if its run is cancel-requested, this worker completes the cancel flow, and
    if a pause is requested, it pauses the run once no step runs, right away instead of
    leaving either to the sweeper (one query when neither)."""
    found = (
        Step.objects.filter(pk=step_id)
        .filter(
            Q(run__status=RunStatus.CANCEL_REQUESTED) | Q(run__pause_requested_at__isnull=False)
        )
        .values_list("run_id", "run__status")
        .first()
    )
    if found is None:
        return
    run_id, status = found
    if status == RunStatus.CANCEL_REQUESTED:
        finish_cancel(run_id, actor=worker.worker_id)
    else:
        from runs.engine.control.lifecycle import settle_pause

        settle_pause(run_id, actor=worker.worker_id)


@dataclass
class Continuation:
    """The next step, born claimed by this worker at attempt 1 by the commit of its
    predecessor: ``run`` as locked by that commit, ``step`` as inserted, the checkpoint
    the commit saved (``checkpoint_id``, whole ``state``), ``workflow`` the definition
    already in use."""

    run: Run
    step: Step
    checkpoint_id: int
    state: dict[str, Any]
    workflow: Workflow


class StepOutcome(NamedTuple):
    """``claimed``: this worker claimed (and ran) the step ``step_id``;
    ``next_step_id``: the step its commit scheduled; ``continued``: that step when it
    was born claimed by this worker (``Continuation``); ``finished``: its commit
    finished the run (SUCCEEDED)."""

    claimed: bool
    step_id: int | None = None
    next_step_id: int | None = None
    continued: Continuation | None = None
    finished: bool = False


NOT_CLAIMED = StepOutcome(False)


def execute_step(step_id: int, worker: WorkerIdentity, *, chain: bool = False) -> StepOutcome:
    """Claim ``step_id`` if it is claimable (``Store.claim``) and run it. A claim that
    needs this process to prepare first (import or migrate the run's workflow version,
    or fire the crash injected before the step) is tried once more after that.

    With ``chain`` the commit inserts the next step claimed by this worker (the caller
    must run it with ``continue_step`` or give it back); without, the next step is
    PENDING and notified. Once the step is claimed nothing raises: every error ends
    the attempt through ``end_attempt``. Database errors before the claim propagate.
    """
    close_old_connections()
    claim = _claim(step_id, worker)
    if claim.outcome == PREPARE and claim.run is not None and claim.step is not None:
        if versions.workflow_for(claim.run, claim.step, worker.worker_id) is None:
            return NOT_CLAIMED
        claim = _claim(step_id, worker)
    run, step = claim.run, claim.step
    if claim.outcome != CLAIMED or run is None or step is None:
        return NOT_CLAIMED
    checkpoint = (claim.checkpoint_id, claim.state or {})
    return _run_attempt(run, step, step.attempt, None, checkpoint, worker, chain)


def _claim(step_id: int, worker: WorkerIdentity) -> Claim:
    return store().claim(
        step_id, worker.worker_id, settings.AGENTOPS_LEASE_SECONDS, known=registry.loaded_keys()
    )


def execute_claimed(step: Step, worker: WorkerIdentity) -> StepOutcome:
    """Run ``step``, claimed for this worker by ``Store.claim_due`` (``step.run`` as after
    that claim, ``step.attempt`` its fencing token), as the start of a chain. The
    definition and the checkpoint are read inside the attempt: an error reading them
    ends the attempt like any other."""
    return _run_attempt(step.run, step, step.attempt, None, None, worker, chain=True)


def continue_step(link: Continuation, worker: WorkerIdentity) -> StepOutcome:
    """Run the step that the previous commit inserted claimed by this worker: no read
    and no claim, everything it needs is in ``link``."""
    return _run_attempt(
        link.run, link.step, 1, link.workflow, (link.checkpoint_id, link.state), worker, True
    )


def _give_back(link: Continuation, worker: WorkerIdentity) -> None:
    """A stopping worker hands the step its commit claimed for it back to the queue."""
    with run_transaction(link.run.pk) as tx:
        leases.release_lease(tx, link.step.pk, 1, actor=worker.worker_id, reason="worker stopping")


def _run_attempt(
    run: Run,
    step: Step,
    attempt: int,
    workflow: Workflow | None,
    checkpoint: tuple[int | None, dict[str, Any]] | None,
    worker: WorkerIdentity,
    chain: bool,
) -> StepOutcome:
    """Run the claimed ``attempt`` of ``step`` outside any transaction, with its lease
    kept by the process's heartbeat, then commit it. ``checkpoint`` is the ``(id, whole
    state)`` the step starts from; ``None`` for either it or ``workflow``: read here.
    Whatever raises between the claim and the commit (the definition and checkpoint
    reads, the step, the checks and the commit itself) ends the attempt through
    ``end_attempt``: nothing leaves a claimed step RUNNING. A ``SystemExit`` or
    ``KeyboardInterrupt`` raised by the step's code (``sys.exit()``) is a failed attempt
    (``STEP_EXITED``), never the end of the worker and its other slots. What the step's
    code logs and prints meanwhile is stored as the attempt's log right after. The
    ``STEP_CLAIMED`` hooks (``runs.engine.hooks``) run first."""
    hooks.reached(hooks.STEP_CLAIMED, run, step, attempt, worker.worker_id)
    with attempt_logs.capturing() as log:
        outcome = _run_captured(run, step, attempt, workflow, checkpoint, worker, chain, log)
    attempt_logs.store(run.pk, step.pk, attempt, log)
    return outcome


def _run_captured(
    run: Run,
    step: Step,
    attempt: int,
    workflow: Workflow | None,
    checkpoint: tuple[int | None, dict[str, Any]] | None,
    worker: WorkerIdentity,
    chain: bool,
    log: attempt_logs.AttemptLogBuffer,
) -> StepOutcome:
    """The body of ``_run_attempt``, its output going to ``log``."""
    done = StepOutcome(True, step.pk)
    step_def = _unknown_step_def(step)
    ctx: StepContext | None = None
    try:
        if workflow is None:
            workflow = registry.get(run.workflow, run.workflow_version)
        if checkpoint is None:
            checkpoint = checkpoints.latest(run)
        step_def = _step_def(workflow, step)
        say(f"ENTER {step.name} (run {run.pk}, attempt {attempt}, worker {worker.worker_id})")
        if attempt - step.attempt_base > step_def.retry.max_attempts:
            # Each claim is an attempt, including claims whose worker died; a step that
            # keeps killing its workers must stop being retried. Attempts before the last
            # human decision (attempt_base) do not count.
            raise _AttemptsExhausted(
                "ATTEMPTS_EXHAUSTED",
                f"claimed {attempt - step.attempt_base} times, "
                f"max_attempts={step_def.retry.max_attempts}",
            )
        ctx = StepContext(
            run=run,
            step=step,
            attempt=attempt,
            worker_id=worker.worker_id,
            workflow=workflow,
            step_def=step_def,
            state=checkpoint[1],
            checkpoint_id=checkpoint[0],
        )
        lease_keeper = heartbeat.keeper()
        lease_keeper.hold(ctx)
        # The step now waits on its own code, a model or a tool: no connection is held.
        release_connection()
        started: list = []
        try:
            if step_def.kind == "map" and not branches.is_branch(step):
                output = branches.items_of(ctx)
            else:
                output = _run_step_code(step_def, ctx)
            if step_def.kind == "child":
                # Under the heartbeat: starting many children takes a while.
                started = children.start_children(ctx, output, worker.worker_id)
        except SystemExit as exc:
            raise StepError(STEP_EXITED, f"the step's code called sys.exit({exc.code!r})") from exc
        except KeyboardInterrupt as exc:
            # A worker turns SIGINT into a graceful stop: only the step's code raises it.
            raise StepError(STEP_EXITED, "the step's code raised KeyboardInterrupt") from exc
        finally:
            lease_keeper.release(ctx)
        if step_def.kind == "approval":
            approvals.commit_approval_request(ctx, _approval_request(output), worker.worker_id)
            return done
        if step_def.kind == "signal":
            waits.commit_signal_wait(ctx, worker.worker_id)
            return done
        if step_def.kind == "map":
            return _commit_map(ctx, output, worker)
        if step_def.kind == "child":
            children.commit_child_wait(ctx, started, worker.worker_id)
            return done
        claimed_by = worker.worker_id if chain and not worker.stopping.is_set() else None
        if ctx.sleep_seconds is not None or ctx.wake_at is not None:
            # A durable timer: the next step is born PENDING with its not_before, not
            # claimed by this worker.
            claimed_by = None
        return _commit_checked(ctx, output, worker, step_def, claimed_by)
    except Exception as exc:  # noqa: BLE001 - every error after the claim ends the attempt
        attempt_logs.write_exception(log, exc)
        messages = ctx.new_messages if ctx is not None else None
        end_attempt(run, step, attempt, worker, workflow, step_def, exc, messages=messages)
        return done


class _AttemptsExhausted(StepError):
    """The step was claimed more often than its policy allows: failed for good."""


def _step_def(workflow: Workflow, step: Step) -> StepDef:
    """The declaration of ``step`` in ``workflow``; raises ``StepUnknown`` when the
    deployed definition has no step of that name."""
    if workflow.has(step.name):
        return workflow.get(step.name)
    raise StepUnknown(
        f"{workflow.name}@{workflow.version} as deployed here has no step {step.name!r} "
        f"(it declares: {', '.join(s.name for s in workflow.steps) or 'none'})"
    )


def _unknown_step_def(step: Step) -> StepDef:
    """The stand-in declaration of a step the deployed definition does not know: the
    default number of attempts, retrying only ``STEP_UNKNOWN`` (another worker may run
    code that knows it), then a takeover."""
    return StepDef(
        name=step.name,
        fn=_unknown_step_fn,
        retry=replace(DEFAULT_RETRY, retryable=frozenset({"STEP_UNKNOWN"})),
        on_exhausted="takeover",
    )


def _unknown_step_fn(ctx: StepContext) -> None:
    raise StepUnknown(f"step {ctx.step.name!r} is not declared")


def _approval_request(output: Any) -> dict[str, Any]:
    """An approval step's return value as the request to store; raises
    ``InvalidValue``/``StepError("INVALID_OUTPUT")`` when it is not a storable dict."""
    request = values.storable(output or {}, "approval request")
    if not isinstance(request, dict):
        raise StepError(
            values.INVALID_OUTPUT,
            "an approval step must return {question, reason, evidence}, "
            f"not {type(request).__name__}",
        )
    return request


def end_attempt(
    run: Run,
    step: Step,
    attempt: int,
    worker: WorkerIdentity,
    workflow: Workflow | None,
    step_def: StepDef,
    exc: Exception,
    messages: list[dict] | None = None,
) -> None:
    """End the claimed ``attempt`` of ``step`` after ``exc``, raised anywhere between the
    claim and the commit: the one failure path. Control exceptions steer (lease lost:
    abandoned; cancel: cancelled; unknown outcome, invalid artifact, exhausted budget:
    paused for a person), a database fault gives the step back uncounted, a
    ``StepError`` is a failed attempt under the step's retry policy, and anything else a
    failed attempt with ``INTERNAL`` (a bug, logged with its traceback). Each is recorded
    as an event; ``messages``, what the step staged so far, are kept in the thread when
    the run fails for good. Never raises: when even the record cannot be written, one warning is
    logged and the lease decides (the next claim counts as an attempt)."""
    try:
        _end_attempt(run, step, attempt, worker, workflow, step_def, exc, messages)
    except Exception:  # noqa: BLE001 - the lease rules take over from here
        logger.warning(
            "step %s attempt %s: recording how it ended failed; its lease will expire",
            step.pk,
            attempt,
            exc_info=True,
        )


def _end_attempt(
    run: Run,
    step: Step,
    attempt: int,
    worker: WorkerIdentity,
    workflow: Workflow | None,
    step_def: StepDef,
    exc: Exception,
    messages: list[dict] | None,
) -> None:
    if isinstance(exc, LeaseLost):
        _record(run.pk, "step.abandoned", {"attempt": attempt, "reason": str(exc)}, step, worker)
    elif isinstance(exc, CancelRequested):
        _release_for_cancel(run, step, attempt, worker)
    elif isinstance(exc, ArtifactInvalid):
        pause_for_invalid_artifact(run, step, attempt, worker.worker_id, exc)
    elif isinstance(exc, OutcomeUnknown):
        unknown_outcomes.pause_unknown(run, step, attempt, worker.worker_id, exc)
    elif isinstance(exc, budget.BudgetExhausted) and workflow is not None:
        _budget_exhausted(run, step, attempt, worker, workflow, step_def, exc)
    elif isinstance(exc, StepError):
        final = isinstance(exc, _AttemptsExhausted)
        _fail_attempt(
            run, step, attempt, worker, step_def, exc, force_final=final, messages=messages
        )
    elif db_faults.classify(exc) is not None:
        _release_after_db_fault(run, step, attempt, worker, exc)
    else:
        logger.error("step %s raised", step.name, exc_info=exc)
        error = StepError("INTERNAL", f"{type(exc).__name__}: {exc}")
        _fail_attempt(run, step, attempt, worker, step_def, error)


def _commit_checked(
    ctx: StepContext,
    output: Any,
    worker: WorkerIdentity,
    step_def: StepDef,
    claimed_by: str | None,
) -> "StepOutcome":
    """Check every value the commit writes (``runs.engine.state.values``), then commit,
    retrying the whole fenced transaction after a lost connection or a lock timeout (the
    fence makes a repeat safe; a lost commit is not a failed attempt). A value that
    cannot be stored raises ``InvalidValue`` (``INVALID_OUTPUT``), also when a checked
    model field finds it inside the commit (the transaction is rolled back first)."""
    output = values.storable(output, "output")
    ctx.new_messages = [_checked_message(m) for m in ctx.new_messages]
    return _retrying(
        ctx.run.pk,
        ctx.step,
        ctx.attempt,
        worker,
        lambda: _commit_success(ctx, output, worker, claimed_by),
        "commit",
    )


def _commit_map(ctx: StepContext, output: Any, worker: WorkerIdentity) -> "StepOutcome":
    """Commit a map step's fan-out (``output``: its items) or one branch's result,
    retried after a lost connection like any commit; the branch that joins returns the
    next step for the chain to run."""
    step = ctx.step
    if not branches.is_branch(step):
        _retrying(
            ctx.run.pk,
            step,
            ctx.attempt,
            worker,
            lambda: branches.commit_fan_out(ctx, output, worker.worker_id),
            "commit",
        )
        return StepOutcome(True, step.pk)
    output = values.storable(output, "output")
    ctx.new_messages = [_checked_message(m) for m in ctx.new_messages]
    next_step_id = _retrying(
        ctx.run.pk,
        step,
        ctx.attempt,
        worker,
        lambda: branches.commit_branch(
            ctx,
            output,
            worker.worker_id,
            lambda tx: write_messages(tx, step.pk, ctx.new_messages, worker.worker_id),
        ),
        "commit",
    )
    return StepOutcome(True, step.pk, next_step_id)


def _checked_message(message: dict) -> dict:
    return {
        **message,
        "content": values.storable(message["content"], "message content"),
        "tool_calls": values.storable(message["tool_calls"], "message tool calls"),
    }


def _storable_messages(messages: list[dict]) -> list[dict]:
    """The staged, non-draft ``messages`` a failure record can write: one that cannot be
    stored is left out, so recording the failure itself never fails on it."""
    out = []
    for m in messages:
        if m.get("draft"):
            continue
        try:
            out.append(_checked_message(m))
        except values.InvalidValue:
            continue
    return out


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


def _run_step_code(step_def: StepDef, ctx: StepContext) -> Any:
    """``step_def.fn(ctx)``, after a place in the step's rate limit when it declares
    one (waiting keeps the lease and counts no retry; the place counts until the code
    ends)."""
    if step_def.rate_limit is None:
        return step_def.fn(ctx)
    grants = rate_limits.acquire(
        [step_def.rate_limit], step=ctx.step, attempt=ctx.attempt, check=ctx.safe_point
    )
    release_connection()
    try:
        return step_def.fn(ctx)
    finally:
        rate_limits.settle(grants)


# -- commit ----------------------------------------------------------------------------


def _commit_success(
    ctx: StepContext, output: Any, worker: WorkerIdentity, claimed_by: str | None
) -> StepOutcome:
    """Commit the result, fenced by attempt, with the step's messages, summaries, its
    checkpoint and the next step (or the run's end) in one transaction
    (``Store.commit``). With ``claimed_by`` the next step is born claimed by that worker
    and returned as the outcome's ``continued``."""
    run, step = ctx.run, ctx.step
    next_name = ctx.next_step if ctx.goto_set else ctx.workflow.next_after(step.name)
    if next_name is not None and ctx.workflow.has(next_name):
        if ctx.workflow.get(next_name).concurrency_key is not None:
            # A step with a concurrency key waits for a place: its claim decides.
            claimed_by = None
    done = store().commit(
        StepCommit(
            run=run,
            step=step,
            attempt=ctx.attempt,
            worker_id=worker.worker_id,
            output=output,
            next_name=next_name,
            claimed_by=claimed_by,
            state=ctx.state,
            checkpoint_id=ctx.checkpoint_id,
            checkpoint_state=ctx.checkpoint_state,
            messages=ctx.new_messages,
            summaries=ctx.new_summaries,
            delay=ctx.sleep_seconds or 0.0,
            at=ctx.wake_at,
        )
    )
    if not done.applied:
        return StepOutcome(True, step.pk)
    if done.next_step is None or done.run is None or done.checkpoint_id is None:
        return StepOutcome(True, step.pk, done.next_step_id, finished=done.finished)
    state = done.state or {}
    link = Continuation(done.run, done.next_step, done.checkpoint_id, state, ctx.workflow)
    return StepOutcome(True, step.pk, done.next_step_id, link)


# -- failures --------------------------------------------------------------------------


def _fail_attempt(
    run: Run,
    step: Step,
    attempt: int,
    worker: WorkerIdentity,
    step_def: StepDef,
    error: StepError,
    force_final: bool = False,
    messages: list[dict] | None = None,
) -> None:
    """Record a failed attempt: schedule a retry with backoff, or give up as the step's
    policy says (fail the run and compensate, or pause it for a takeover). Retried
    after a lost connection like a commit. ``messages``: what the step staged so far
    (``StepContext.new_messages``), kept in the thread when the run fails for good; a
    retried or taken-over step makes them again when it re-executes."""
    _retrying(
        run.pk,
        step,
        attempt,
        worker,
        lambda: _record_failed_attempt(
            run, step, attempt, worker, step_def, error, force_final, messages or []
        ),
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
    messages: list[dict],
) -> None:
    """The body of ``_fail_attempt``: read the clock, decide, write (one transaction)."""
    # Exception text is untrusted: NUL, lone surrogates, a code too long or not text
    # would make the write fail.
    values.storable_error(error)
    started = Step.objects.filter(pk=step.pk).values_list("started_at", flat=True).first()
    now = db_now()
    elapsed = (now - started).total_seconds() if started else 0.0
    decision = step_def.retry.decide(
        attempt - step.attempt_base, error.code, elapsed, retry_after=error.retry_after
    )
    with run_transaction(run.pk) as tx:
        common = {
            "owner": "",
            "lease_until": None,
            "error_code": error.code,
            "error_detail": error.detail[:4000],
        }
        payload = {"attempt": attempt, "error_code": error.code, "error_detail": error.detail[:500]}
        rejected = {"error_code": error.code}
        if decision.retry and not force_final and tx.run.status != RunStatus.CANCEL_REQUESTED:
            # not_before is computed once from the database clock read above, so the event
            # says exactly when the next attempt may start.
            not_before = now + timedelta(seconds=decision.delay)
            retry = Due(
                step,
                worker.worker_id,
                "step.retry_scheduled",
                {
                    **payload,
                    "delay_s": decision.delay,
                    "retry_after_s": decision.retry_after,
                    "failed_at": now.isoformat(),
                    "not_before": not_before.isoformat(),
                },
                at=not_before,
                attempt=attempt,
                # The sweeper notifies when not_before passes (notified_at < not_before).
                notify=False,
                rejected=rejected,
                fields={"error_code": error.code, "error_detail": error.detail[:4000]},
            )
            store().schedule(tx, retry)
            return
        if not tx.finish_attempt(
            step,
            attempt,
            StepStatus.FAILED,
            actor=worker.worker_id,
            rejected=rejected,
            payload={**payload, "reason": decision.reason},
            finished_at=Now(),
            **common,
        ):
            return
        if tx.run.status == RunStatus.CANCEL_REQUESTED:
            return
        if branches.is_branch(step) and branches.branch_failed(
            tx,
            step,
            step_def,
            error_code=error.code,
            actor=worker.worker_id,
            reason=f"{ledger.step_scope(step)}: {error.code}",
        ):
            return
        if (step_def.on_exhausted == "takeover" or error.takeover) and not isinstance(
            error, budget.BudgetExhausted
        ):
            reason = f"{step.name} failed: {error.code} ({decision.reason})"
            if isinstance(error, StepUnknown):
                # The code alone does not say which step: the detail names it.
                reason = f"{step.name} failed: {error.detail[:500]} ({decision.reason})"
            open_takeover(
                tx,
                cause=error.takeover_cause,
                reason=reason,
                actor=worker.worker_id,
                step=step,
                suggested_action=SUGGESTED_ACTIONS.get(error.takeover_cause)
                or error.suggested_action
                or suggested_action(error.code, step_def.retry.retryable),
                evidence={
                    "error_code": error.code,
                    "error_detail": error.detail[:2000],
                    **(error.evidence or {}),
                },
            )
        else:
            insert_messages(tx, run, step.pk, _storable_messages(messages), worker.worker_id)
            tx.transition_run(
                RunStatus.FAILED,
                actor=worker.worker_id,
                reason=f"{ledger.step_scope(step)}: {error.code}",
                finished_at=Now(),
                error_code=error.code,
                error_detail=error.detail[:4000],
            )
            compensation.schedule(
                tx, actor=worker.worker_id, reason=f"run failed at {step.name}: {error.code}"
            )


#: What a takeover opened by a failed step suggests, by cause (default: the error's
#: own, else one chosen by its code's class).
SUGGESTED_ACTIONS = {
    "non_determinism": (
        "The step asked a recorded call differently than before. Make the step ask it "
        "as recorded (deploy the code it ran with) and retry, or resume from an earlier "
        "checkpoint to decide afresh."
    ),
}


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
            given_back = Due(
                step,
                worker.worker_id,
                "step.released",
                {"attempt": attempt, "reason": "database fault", "error": detail},
                attempt=attempt,
                # Its lease may have run out while it was cut off; nobody took the step.
                fence=ATTEMPT,
                # Not a failed attempt: it does not count against max_attempts.
                counted=False,
                progress=False,
                rejected={"during": "release"},
            )
            store().schedule(tx, given_back)

    try:
        _retrying(run.pk, step, attempt, worker, release, "release")
    except DatabaseError:
        logger.warning("step %s: release failed; its lease will expire", step.pk, exc_info=True)


def _release_for_cancel(run: Run, step: Step, attempt: int, worker: WorkerIdentity) -> None:
    """The step stopped at a safe point because the run is cancel- or pause-requested:
    mark it CANCELLED (fenced), releasing the lease. When the run is not stopping (a
    pause request, or one withdrawn meanwhile), give the step back PENDING instead,
    uncounted: held while the pause is requested, notified at once otherwise."""
    with run_transaction(run.pk) as tx:
        if tx.run.status not in (RunStatus.CANCEL_REQUESTED, *RUN_TERMINAL):
            held = tx.run.pause_requested_at is not None
            reason = "pause requested" if held else "stop request withdrawn"
            given_back = Due(
                step,
                worker.worker_id,
                "step.released",
                {"attempt": attempt, "reason": reason},
                attempt=attempt,
                # Not a failed attempt: it does not count against max_attempts.
                counted=False,
                # Held while the pause is requested; notified at once otherwise.
                notify=not held,
                progress=False,
            )
            store().schedule(tx, given_back)
            return
        tx.finish_attempt(
            step,
            attempt,
            StepStatus.CANCELLED,
            actor=worker.worker_id,
            payload={"attempt": attempt, "reason": "cancel requested"},
            owner="",
            lease_until=None,
            finished_at=Now(),
        )


def _record(run_id, type: str, payload: dict, step: Step, worker: WorkerIdentity) -> None:
    with run_transaction(run_id) as tx:
        tx.event(type, payload, step_id=step.pk, actor=worker.worker_id, progress=False)
