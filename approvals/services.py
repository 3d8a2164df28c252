"""People in the loop (DESIGN section 7): approval requests and decisions, approval
expiry, and the resolutions of takeovers.

Every function here writes its status changes through ``runs.engine.state.gateway`` (run row
locked first) with an event naming the actor; views, the API and the CLI call these and
stay thin.
"""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import DateTimeField, ExpressionWrapper, Max
from django.db.models.functions import Now

from approvals.models import Approval, Takeover
from approvals.policy import check_decider
from approvals.tool_calls import decision_terms
from runs.engine.control.lifecycle import ControlError
from runs.engine.state.gateway import RunTx, run_transaction
from runs.models import Checkpoint, Run, Step, Thread
from runs.states import RUN_TERMINAL, RunStatus, StepStatus, command_allows, command_states

DECISIONS = {"approve": Approval.Status.APPROVED, "reject": Approval.Status.REJECTED}
RESOLUTIONS = ("resume", "retry", "mark_done", "cancel")


class DecisionConflict(ControlError):
    """A second, different decision on an approval that is already decided (or expired
    or cancelled). ``approval`` is the row as decided."""

    def __init__(self, approval: Approval, wanted: str):
        super().__init__(
            "decision_conflict",
            f"approval {approval.pk} is already {approval.status}"
            + (f" by {approval.decided_by.get_username()}" if approval.decided_by_id else "")
            + f"; cannot {wanted} it",
        )
        self.approval = approval


def user_actor(user) -> str:
    """The event actor string for a person: ``user:<username>``."""
    return f"user:{user.get_username()}"


# -- asking --------------------------------------------------------------------------


def commit_approval_request(ctx, request: dict[str, Any], worker_id: str) -> None:
    """Called by the executor when an approval step's function returned ``request``
    (``{"question", "reason", "evidence"}``): in one transaction fenced by the attempt,
    the step goes WAITING with its lease released, the Approval row is created with its
    routes and expiry, and the run goes WAITING_APPROVAL. Nothing is dispatched until a
    decision, so no worker holds anything while the run waits.
    """
    from runs.engine.execution.executor import _commit_rejection

    run, step, attempt, step_def = ctx.run, ctx.step, ctx.attempt, ctx.step_def
    options = step_def.options
    approve_to = ctx.workflow.next_after(step.name)
    reject_to = options.get("on_reject")
    expire_to = options.get("on_expire") or reject_to
    for target in (reject_to, expire_to):
        if target is not None:
            ctx.workflow.get(target)
    ttl = options.get("expires_after")
    ttl = settings.AGENTOPS_APPROVAL_EXPIRY_SECONDS if ttl is None else ttl
    with run_transaction(run.pk) as tx:
        rejected = _commit_rejection(tx, step, attempt)
        if rejected:
            tx.event(
                "step.commit_rejected",
                {"attempt": attempt, "reason": rejected, "worker": worker_id},
                step_id=step.pk,
                actor=worker_id,
                progress=False,
            )
            return
        if tx.run.status == RunStatus.CANCEL_REQUESTED:
            tx.transition_step(
                step.pk,
                StepStatus.CANCELLED,
                expected=StepStatus.RUNNING,
                attempt=attempt,
                actor=worker_id,
                payload={"reason": "cancel requested before the approval"},
                owner="",
                lease_until=None,
                finished_at=Now(),
            )
            return
        tx.transition_step(
            step.pk,
            StepStatus.WAITING,
            expected=StepStatus.RUNNING,
            attempt=attempt,
            actor=worker_id,
            event_type="step.waiting",
            payload={"attempt": attempt, "waiting_for": "approval"},
            owner="",
            lease_until=None,
        )
        expires_at = (
            ExpressionWrapper(Now() + timedelta(seconds=ttl), output_field=DateTimeField())
            if ttl
            else None
        )
        approval = Approval.objects.create(
            run_id=run.pk,
            step_id=step.pk,
            question=str(request.get("question", ""))[:4000],
            reason=str(request.get("reason", "")),
            evidence=request.get("evidence") or {},
            expires_at=expires_at,
            routes={"approve": approve_to, "reject": reject_to, "expire": expire_to},
        )
        tx.event(
            "approval.requested",
            {
                "approval_id": approval.pk,
                "question": approval.question,
                "reason": approval.reason,
                "expires_in_s": ttl or None,
            },
            step_id=step.pk,
            actor=worker_id,
        )
        tx.transition_run(
            RunStatus.WAITING_APPROVAL,
            actor=worker_id,
            reason=f"waiting for approval {approval.pk}",
            current_step=step.pk,
        )


# -- deciding --------------------------------------------------------------------------


def decide(
    approval: Approval,
    *,
    decision: str,
    user,
    comment: str = "",
    arguments=None,
    message: str = "",
) -> Approval:
    """Record ``decision`` ("approve" or "reject") by ``user`` and continue the run on
    the matching route, in one transaction. On an agent's tool call, ``arguments``
    (with approve) replaces the call's arguments and ``message`` (with reject) reaches
    the model instead of the tool result (``approvals.tool_calls``; ``invalid_arguments``
    with field errors, nothing changed, when they do not fit the tool).

    Idempotent: the same decision again returns the approval unchanged (one decision,
    one event). Raises what ``approvals.policy.check_decider`` raises (no approver
    permission, a superuser without the role, self-approval),
    ``DecisionConflict`` for a different decision after the first (or on an expired or
    cancelled approval), ``ControlError("invalid_decision")`` for another word.
    """
    if decision not in DECISIONS:
        raise ControlError(
            "invalid_decision",
            f"decision must be approve or reject, not {decision!r}",
            {"decision": "must be approve or reject"},
        )
    check_decider(approval, user)
    target = DECISIONS[decision]
    actor = user_actor(user)
    extra_output, extra_event = decision_terms(approval, decision, arguments, message)
    with run_transaction(approval.run_id) as tx:
        current = Approval.objects.select_for_update().get(pk=approval.pk)
        if current.status == target:
            return current
        if current.status != Approval.Status.PENDING:
            raise DecisionConflict(current, decision)
        if not command_allows("decide_approval", tx.run.status):
            raise ControlError(
                "not_allowed_in_state",
                f"run is {tx.run.status}; approvals are decided on "
                f"{command_states('decide_approval')} runs",
            )
        Approval.objects.filter(pk=current.pk, status=Approval.Status.PENDING).update(
            status=target, decided_by=user, decided_at=Now(), comment=comment
        )
        tx.event(
            f"approval.{target.lower()}",
            {"approval_id": current.pk, "comment": comment, "reason": comment, **extra_event},
            step_id=current.step_id,
            actor=actor,
        )
        route = "approve" if target == Approval.Status.APPROVED else "reject"
        _continue_after(
            tx,
            current,
            route,
            actor,
            {
                "decision": target.lower(),
                "by": user.get_username(),
                "comment": comment,
                **extra_output,
            },
        )
    current.refresh_from_db()
    return current


def expire_approvals(actor: str, batch: int) -> int:
    """Sweeper task: PENDING approvals past ``expires_at`` become EXPIRED and their run
    takes the expiry route. Returns how many expired."""
    due = list(
        Approval.objects.filter(status=Approval.Status.PENDING, expires_at__lt=Now())
        .order_by("expires_at")
        .values_list("pk", "run_id")[:batch]
    )
    done = 0
    for approval_id, run_id in due:
        with run_transaction(run_id) as tx:
            moved = Approval.objects.filter(
                pk=approval_id, status=Approval.Status.PENDING, expires_at__lt=Now()
            ).update(status=Approval.Status.EXPIRED, decided_at=Now())
            if not moved:
                continue
            approval = Approval.objects.get(pk=approval_id)
            tx.event(
                "approval.expired",
                {"approval_id": approval_id, "reason": "no decision before expires_at"},
                step_id=approval.step_id,
                actor=actor,
            )
            if tx.run.status == RunStatus.WAITING_APPROVAL:
                _continue_after(tx, approval, "expire", actor, {"decision": "expired"})
            done += 1
    return done


def _continue_after(
    tx: RunTx, approval: Approval, route: str, actor: str, output: dict[str, Any]
) -> None:
    """The waiting step succeeds with ``output`` (the decision), a checkpoint is saved,
    and the run continues on ``approval.routes[route]``; no route on reject/expire fails
    the run (APPROVAL_REJECTED / APPROVAL_EXPIRED)."""
    from runs.engine.execution.executor import schedule_step
    from runs.engine.state.checkpoints import next_state

    step = Step.objects.get(pk=approval.step_id)
    next_name = approval.routes.get(route)
    tx.transition_step(
        step.pk,
        StepStatus.SUCCEEDED,
        expected=StepStatus.WAITING,
        actor=actor,
        payload={"approval_id": approval.pk, **output},
        output=output,
        finished_at=Now(),
    )
    previous = (
        Checkpoint.objects.filter(run_id=tx.run.pk, generation=tx.run.generation)
        .order_by("-pk")
        .first()
    )
    message_seq = Thread.objects.values_list("message_seq", flat=True).get(pk=tx.run.thread_id)
    state = next_state(
        previous.state if previous else {},
        run=tx.run,
        step=step,
        output=output,
        next_name=next_name,
        message_seq=message_seq,
    )
    Checkpoint.objects.create(
        run_id=tx.run.pk,
        step_id=step.pk,
        name=f"after:{step.name}",
        generation=tx.run.generation,
        state=state,
    )
    tx.event("checkpoint.saved", {"name": f"after:{step.name}"}, step_id=step.pk, actor=actor)
    if next_name is None and route != "approve":
        code = "APPROVAL_REJECTED" if route == "reject" else "APPROVAL_EXPIRED"
        tx.transition_run(
            RunStatus.FAILED,
            actor=actor,
            reason=f"approval {approval.pk} {route}",
            finished_at=Now(),
            current_step=None,
            error_code=code,
            error_detail=output.get("comment", ""),
        )
        return
    tx.transition_run(RunStatus.RUNNING, actor=actor, reason=f"approval {approval.pk}: {route}")
    if next_name is None:
        tx.transition_run(RunStatus.SUCCEEDED, actor=actor, finished_at=Now(), current_step=None)
        return
    schedule_step(tx, next_name, seq=_next_seq(tx.run), actor=actor)


def _next_seq(run: Run) -> int:
    return (Step.objects.filter(run_id=run.pk).aggregate(m=Max("seq"))["m"] or 0) + 1


# -- takeovers -------------------------------------------------------------------------


def claim_takeover(takeover: Takeover, user) -> Takeover:
    """``user`` takes the open takeover on (so two operators do not both act). Claiming
    again by the same user is a no-op. Raises ``PermissionDenied`` without
    ``runs.operate_run``, ``ControlError`` ``takeover_resolved`` / ``already_claimed``."""
    if not user.has_perm("runs.operate_run"):
        raise PermissionDenied(f"{user.get_username()} may not operate runs")
    with run_transaction(takeover.run_id) as tx:
        current = Takeover.objects.select_for_update().get(pk=takeover.pk)
        if current.status != Takeover.Status.OPEN:
            raise ControlError("takeover_resolved", f"takeover {current.pk} is already resolved")
        if current.claimed_by_id == user.pk:
            return current
        if current.claimed_by_id is not None:
            raise ControlError(
                "already_claimed",
                f"takeover {current.pk} is claimed by {current.claimed_by.get_username()}",
            )
        Takeover.objects.filter(pk=current.pk, claimed_by__isnull=True).update(
            claimed_by=user, claimed_at=Now()
        )
        tx.event(
            "takeover.claimed",
            {"takeover_id": current.pk},
            step_id=current.step_id,
            actor=user_actor(user),
        )
    current.refresh_from_db()
    return current


def resolve_takeover(
    takeover: Takeover,
    *,
    action: str,
    actor: str,
    reason: str,
    checkpoint: str | None = None,
    evidence: str = "",
    result=None,
) -> Takeover:
    """Resolve an OPEN takeover with one of ``RESOLUTIONS``:

    - ``resume``: from ``checkpoint`` (``runs.engine.control.rewind.resume_from_checkpoint``), or,
      without one, continue where the run stopped (the open step is dispatched again;
      after an unknown-version pause this needs code that now knows the version);
    - ``retry``: run the failed/unknown step again (``lifecycle.retry_step``);
    - ``mark_done``: record the step as done with ``evidence`` (and ``result`` as its
      output) and continue with the next step;
    - ``cancel``: ``cancel.request_cancel``.

    ``reason`` is required. The takeover becomes RESOLVED with a ``takeover.resolved``
    event (actor, reason, evidence) in the same transaction as the run's change, except
    ``cancel`` and ``resume`` from a checkpoint, whose own functions record their events.
    Raises ``ControlError`` (``invalid_action``, ``reason_required``,
    ``takeover_resolved``, ``unknown_workflow_version``, ...).
    """
    from runs.engine.control import lifecycle, rewind
    from runs.engine.control.cancel import request_cancel

    if action not in RESOLUTIONS:
        raise ControlError(
            "invalid_action",
            f"action must be one of {', '.join(RESOLUTIONS)}",
            {"action": "unknown action"},
        )
    if not reason or not reason.strip():
        raise ControlError("reason_required", "a reason is required", {"reason": "required"})
    takeover.refresh_from_db()
    if takeover.status != Takeover.Status.OPEN:
        raise ControlError("takeover_resolved", f"takeover {takeover.pk} is already resolved")
    run = Run.objects.get(pk=takeover.run_id)
    note = {"action": action, "reason": reason, "evidence": evidence, "checkpoint": checkpoint}
    if action == "cancel":
        _mark_resolved(takeover, actor, note)
        request_cancel(run, actor=actor, reason=reason)
    elif action == "resume" and checkpoint:
        rewind.resume_from_checkpoint(
            run, checkpoint, actor=actor, reason=reason, takeover=takeover, note=note
        )
    elif action == "resume":
        _continue_in_place(run, takeover, actor, note)
    elif action == "retry":
        lifecycle.retry_step(run, actor=actor, reason=reason, takeover=takeover, note=note)
    elif _unknown_step(run) is not None:
        _mark_unknown_done(run, takeover, actor, note, result)
    else:
        _mark_done(run, takeover, actor, note, result)
    takeover.refresh_from_db()
    return takeover


def resolve_open_takeover(
    tx: RunTx, actor: str, note: dict[str, Any], takeover: Takeover | None = None
) -> Takeover | None:
    """Inside a run transaction: mark the run's OPEN takeover (or ``takeover``) RESOLVED
    with ``note`` (``{"action", "reason", "evidence", ...}``) and record
    ``takeover.resolved``. Returns it, or ``None`` when none was open."""
    query = Takeover.objects.filter(run_id=tx.run.pk, status=Takeover.Status.OPEN)
    if takeover is not None:
        query = query.filter(pk=takeover.pk)
    current = query.first()
    if current is None:
        return None
    Takeover.objects.filter(pk=current.pk, status=Takeover.Status.OPEN).update(
        status=Takeover.Status.RESOLVED,
        resolution=note.get("action", ""),
        resolution_note=note.get("reason", ""),
        resolved_by=actor,
        resolved_at=Now(),
    )
    tx.event(
        "takeover.resolved",
        {"takeover_id": current.pk, **note},
        step_id=current.step_id,
        actor=actor,
    )
    return current


def _mark_resolved(takeover: Takeover, actor: str, note: dict[str, Any]) -> None:
    with run_transaction(takeover.run_id) as tx:
        if tx.run.status in RUN_TERMINAL:
            raise ControlError("run_terminal", f"run is {tx.run.status}")
        resolve_open_takeover(tx, actor, note, takeover)


def _continue_in_place(run: Run, takeover: Takeover, actor: str, note: dict[str, Any]) -> None:
    """``resume`` without a checkpoint: the run goes RUNNING and its open step is
    dispatched again; a failed or unknown step is retried instead."""
    from runs.engine.control import lifecycle
    from runs.engine.control.versions import known_or_migratable
    from runs.engine.execution import dispatch

    if takeover.cause == Takeover.Cause.UNKNOWN_WORKFLOW_VERSION and not known_or_migratable(run):
        raise ControlError(
            "unknown_workflow_version",
            f"this code still has no {run.workflow}@{run.workflow_version} "
            "(nor a migration from it); deploy it first",
        )
    step = (
        Step.objects.filter(
            run=run,
            generation=run.generation,
            status__in=[StepStatus.PENDING, StepStatus.FAILED, StepStatus.UNKNOWN],
        )
        .order_by("-seq")
        .first()
    )
    if step is not None and step.status != StepStatus.PENDING:
        lifecycle.retry_step(run, actor=actor, reason=note["reason"], takeover=takeover, note=note)
        return
    with run_transaction(run.pk) as tx:
        if not command_allows("resolve_takeover", tx.run.status):
            raise ControlError(
                "not_allowed_in_state",
                f"run is {tx.run.status}; takeovers are resolved on "
                f"{command_states('resolve_takeover')} runs",
            )
        resolve_open_takeover(tx, actor, note, takeover)
        if step is None and _back_to_waiting(tx, actor, note):
            return
        tx.transition_run(RunStatus.RUNNING, actor=actor, reason=note["reason"])
        if step is None:
            raise ControlError(
                "nothing_to_resume", "no open step: resume from a checkpoint instead"
            )
        Step.objects.filter(pk=step.pk).update(notified_at=Now(), not_before=Now())
        tx.event(
            "run.resume_requested",
            {"step": step.name, "reason": note["reason"]},
            step_id=step.pk,
            actor=actor,
        )
        dispatch.notify_on_commit(run.pk, step.pk, step.attempt)


def _back_to_waiting(tx: RunTx, actor: str, note: dict[str, Any]) -> bool:
    """A run paused while it waited (an operator's pause of WAITING_APPROVAL or
    WAITING_EXTERNAL) waits again: for its approval if still PENDING, or on that
    approval's route if it was decided or expired meanwhile, else for its callback.
    Returns False when the run has no WAITING step."""
    waiting = (
        Step.objects.filter(
            run_id=tx.run.pk, generation=tx.run.generation, status=StepStatus.WAITING
        )
        .order_by("-seq")
        .first()
    )
    if waiting is None:
        return False
    approval = Approval.objects.filter(step_id=waiting.pk).order_by("-pk").first()
    if approval is None:
        tx.transition_run(RunStatus.WAITING_EXTERNAL, actor=actor, reason=note["reason"])
    elif approval.status == Approval.Status.PENDING:
        tx.transition_run(RunStatus.WAITING_APPROVAL, actor=actor, reason=note["reason"])
    else:
        route = {Approval.Status.APPROVED: "approve", Approval.Status.REJECTED: "reject"}
        decision = approval.status.lower()
        _continue_after(
            tx, approval, route.get(approval.status, "expire"), actor, {"decision": decision}
        )
    return True


def _unknown_step(run: Run) -> Step | None:
    return (
        Step.objects.filter(run=run, generation=run.generation, status=StepStatus.UNKNOWN)
        .order_by("-seq")
        .first()
    )


def _mark_unknown_done(
    run: Run, takeover: Takeover, actor: str, note: dict[str, Any], result
) -> None:
    """``mark_done`` on an unknown outcome is issue 3's ``resolve_unknown(outcome="done")``:
    the operation is recorded as done and the step re-runs, reusing it."""
    from runs.engine.effects.unknown_outcomes import resolve_unknown
    from runs.engine.state.gateway import record_event

    if not note.get("evidence"):
        raise ControlError(
            "evidence_required", "mark_done needs evidence", {"evidence": "required"}
        )
    step = _unknown_step(run)
    resolve_unknown(
        run, step.name, outcome="done", evidence=note["evidence"], actor=actor, result=result
    )
    record_event(
        run.pk,
        "takeover.resolved",
        {**note, "takeover_id": takeover.pk},
        step_id=step.pk,
        actor=actor,
    )


def _mark_done(run: Run, takeover: Takeover, actor: str, note: dict[str, Any], result) -> None:
    """``mark_done``: the operator says the step's work is done (``evidence`` says how
    they know). The step becomes SUCCEEDED with ``result`` as output (a FAILED step gets a
    new SUCCEEDED row: failed attempts stay visible), a checkpoint is saved, and the run
    continues with the next step."""
    from runs.engine.execution.executor import schedule_step
    from runs.engine.state.checkpoints import next_state
    from runs.workflows import registry

    if not note.get("evidence"):
        raise ControlError(
            "evidence_required", "mark_done needs evidence", {"evidence": "required"}
        )
    try:
        workflow = registry.get(run.workflow, run.workflow_version)
    except registry.UnknownWorkflow as exc:
        raise ControlError("unknown_workflow_version", str(exc)) from exc
    with run_transaction(run.pk) as tx:
        if tx.run.status != RunStatus.PAUSED:
            raise ControlError("not_allowed_in_state", f"run is {tx.run.status}, not PAUSED")
        step = (
            Step.objects.filter(
                run_id=run.pk,
                generation=tx.run.generation,
                status__in=[StepStatus.FAILED, StepStatus.UNKNOWN, StepStatus.PENDING],
            )
            .order_by("-seq")
            .first()
        )
        if step is None:
            raise ControlError("nothing_to_mark", "the run has no failed, unknown or pending step")
        resolve_open_takeover(tx, actor, note, takeover)
        output = result if result is not None else {"marked_done": True}
        payload = {"reason": note["reason"], "evidence": note["evidence"]}
        if step.status == StepStatus.FAILED:
            done = Step.objects.create(
                run_id=run.pk, name=step.name, seq=_next_seq(tx.run), generation=tx.run.generation
            )
            tx.event(
                "step.scheduled", {"name": step.name, "seq": done.seq}, step_id=done.pk, actor=actor
            )
        else:
            done = step
        tx.transition_step(
            done.pk,
            StepStatus.SUCCEEDED,
            expected=done.status,
            actor=actor,
            event_type="step.marked_done",
            payload=payload,
            output=output,
            finished_at=Now(),
            owner="",
            lease_until=None,
        )
        next_name = workflow.next_after(step.name)
        previous = (
            Checkpoint.objects.filter(run_id=run.pk, generation=tx.run.generation)
            .order_by("-pk")
            .first()
        )
        message_seq = Thread.objects.values_list("message_seq", flat=True).get(pk=tx.run.thread_id)
        state = next_state(
            previous.state if previous else {},
            run=tx.run,
            step=done,
            output=output,
            next_name=next_name,
            message_seq=message_seq,
        )
        Checkpoint.objects.create(
            run_id=run.pk,
            step_id=done.pk,
            name=f"after:{step.name}",
            generation=tx.run.generation,
            state=state,
        )
        tx.event("checkpoint.saved", {"name": f"after:{step.name}"}, step_id=done.pk, actor=actor)
        tx.transition_run(RunStatus.RUNNING, actor=actor, reason=note["reason"])
        if next_name is None:
            tx.transition_run(
                RunStatus.SUCCEEDED, actor=actor, finished_at=Now(), current_step=None
            )
        else:
            schedule_step(tx, next_name, seq=_next_seq(tx.run), actor=actor)
