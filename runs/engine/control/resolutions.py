"""The ways out of a takeover: an operator resolves the run's OPEN
takeover by resuming it, retrying the failed step, marking the step done, or cancelling.

Each resolution goes through the gateway (run row locked first) and records who, why
and with what evidence; the approvals app's services and views call ``resolve_takeover``.
"""

from typing import Any

from django.db.models.functions import Now

from runs.engine.control import branches, lifecycle, rewind, waits
from runs.engine.control.approvals import expire_one
from runs.engine.control.cancel import request_cancel
from runs.engine.control.refusals import (
    MAX_EVIDENCE_CHARS,
    ControlError,
    check_length,
    require_reason,
)
from runs.engine.control.versions import known_or_migratable
from runs.engine.effects.unknown_outcomes import check_against_verify, resolve_unknown
from runs.engine.state.clock import db_now
from runs.engine.state.gateway import RunTx, record_event, run_transaction
from runs.engine.state.store import store
from runs.engine.state.store_interface import Decision, Due, Resolution
from runs.models import Approval, Run, Step, Takeover
from runs.states import RUN_TERMINAL, RunStatus, StepStatus, command_allows, command_states
from runs.workflows import registry

RESOLUTIONS = ("resume", "retry", "mark_done", "cancel")


def resolve_takeover(
    takeover,
    *,
    action: str,
    actor: str,
    reason: str,
    checkpoint: str | None = None,
    evidence: str = "",
    result=None,
    against_verify: bool = False,
):
    """Resolve an OPEN takeover (a ``runs.models.Takeover``) with one of
    ``RESOLUTIONS``:

    - ``resume``: from ``checkpoint`` (``rewind.resume_from_checkpoint``), or, without
      one, continue where the run stopped (the open step is dispatched again; after an
      unknown-version pause this needs code that now knows the version);
    - ``retry``: run the failed/unknown step again (``lifecycle.retry_step``);
    - ``mark_done``: record the step as done with ``evidence`` (and ``result`` as its
      output) and continue with the next step;
    - ``cancel``: ``cancel.request_cancel``.

    A resolution of an unknown outcome that contradicts the latest verify answer
    (``mark_done`` after it said ``not_done``; ``retry`` or ``resume`` in place after it
    said ``done``) is refused (``contradicts_verify``) unless ``against_verify``; then
    the events record the answer gone against.

    ``reason`` is required. The takeover becomes RESOLVED with a ``takeover.resolved``
    event (actor, reason, evidence) in the same transaction as the run's change, except
    ``cancel`` and ``resume`` from a checkpoint, whose own functions record their events.
    Returns the takeover as stored afterwards. Raises ``ControlError``
    (``invalid_action``, ``reason_required``, ``takeover_resolved``,
    ``unknown_workflow_version``, ...).
    """
    if action not in RESOLUTIONS:
        raise ControlError(
            "invalid_action",
            f"action must be one of {', '.join(RESOLUTIONS)}",
            {"action": "unknown action"},
        )
    require_reason(reason, "resolve")
    check_length(evidence or "", "evidence", MAX_EVIDENCE_CHARS)
    takeover.refresh_from_db()
    if takeover.status != Takeover.Status.OPEN:
        raise ControlError("takeover_resolved", f"takeover {takeover.pk} is already resolved")
    run = Run.objects.get(pk=takeover.run_id)
    note: dict[str, Any] = {
        "action": action,
        "reason": reason,
        "evidence": evidence,
        "checkpoint": checkpoint,
    }
    unknown = _unknown_step(run)
    in_place = action in ("mark_done", "retry") or (action == "resume" and not checkpoint)
    if unknown is not None and in_place:
        contradicted = check_against_verify(
            unknown.pk, done=action == "mark_done", confirmed=against_verify
        )
        if contradicted:
            note["against_verify"] = contradicted
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
        lifecycle.retry_step(
            run,
            actor=actor,
            reason=reason,
            takeover=takeover,
            note=note,
            against_verify="against_verify" in note,
        )
    elif _unknown_step(run) is not None:
        _mark_unknown_done(run, takeover, actor, note, result)
    else:
        _mark_done(run, takeover, actor, note, result)
    takeover.refresh_from_db()
    return takeover


def _mark_resolved(takeover, actor: str, note: dict[str, Any]) -> None:
    with run_transaction(takeover.run_id) as tx:
        if tx.run.status in RUN_TERMINAL:
            raise ControlError("run_terminal", f"run is {tx.run.status}")
        store().resolve(tx, Resolution(actor, note, takeover))


def _continue_in_place(run: Run, takeover, actor: str, note: dict[str, Any]) -> None:
    """``resume`` without a checkpoint: the run goes RUNNING and its open step is
    dispatched again; a failed or unknown step is retried instead."""
    if takeover.cause == "unknown_workflow_version" and not known_or_migratable(run):
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
        lifecycle.retry_step(
            run,
            actor=actor,
            reason=note["reason"],
            takeover=takeover,
            note=note,
            against_verify="against_verify" in note,
        )
        return
    with run_transaction(run.pk) as tx:
        if not command_allows("resolve_takeover", tx.run.status):
            raise ControlError(
                "not_allowed_in_state",
                f"run is {tx.run.status}; takeovers are resolved on "
                f"{command_states('resolve_takeover')} runs",
            )
        store().resolve(tx, Resolution(actor, note, takeover))
        fanned_out = branches.waiting_map_steps(tx)
        if fanned_out and (step is None or step.status == StepStatus.PENDING):
            # A paused fan-out goes on where it was: every held branch at once.
            tx.transition_run(RunStatus.RUNNING, actor=actor, reason=note["reason"])
            notified = branches.resume_fan_out(tx, fanned_out, actor=actor)
            tx.event(
                "run.resume_requested",
                {"reason": note["reason"], "branches": notified},
                actor=actor,
            )
            return
        if step is None and _back_to_waiting(tx, actor, note):
            return
        tx.transition_run(RunStatus.RUNNING, actor=actor, reason=note["reason"])
        if step is None:
            raise ControlError(
                "nothing_to_resume", "no open step: resume from a checkpoint instead"
            )
        # A step never attempted yet and held back is asleep on a durable timer: it
        # keeps its time (the sweeper notifies it when due). A retry's backoff is cut.
        if step.attempt == 0 and step.not_before > db_now():
            store().schedule(tx, Due(step, actor, at=step.not_before, notify=False))
            tx.event(
                "run.resume_requested",
                {
                    "step": step.name,
                    "reason": note["reason"],
                    "sleeping_until": step.not_before.isoformat(),
                },
                step_id=step.pk,
                actor=actor,
            )
            return
        store().schedule(tx, Due(step, actor))
        tx.event(
            "run.resume_requested",
            {"step": step.name, "reason": note["reason"]},
            step_id=step.pk,
            actor=actor,
        )


def _back_to_waiting(tx: RunTx, actor: str, note: dict[str, Any]) -> bool:
    """A run paused while it waited (an operator's pause of WAITING_APPROVAL or
    WAITING_EXTERNAL) waits again: for its approval if still PENDING, or on that
    approval's route if it was decided or expired meanwhile (or its deadline passed),
    else for its signal (taking one kept meanwhile).
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
        # A signal kept while the run was paused is taken now; else a deadline that
        # passed meanwhile takes the timeout route now, not at a sweep.
        if not waits.take_kept_signal(tx, actor) and (
            Step.objects.filter(pk=waiting.pk, wait_until__lt=Now())
            .exclude(signal_name="")
            .exists()
        ):
            waits.time_out(
                tx, waiting, registry.get(tx.run.workflow, tx.run.workflow_version), actor
            )
    elif approval.status == Approval.Status.PENDING:
        tx.transition_run(RunStatus.WAITING_APPROVAL, actor=actor, reason=note["reason"])
        # Its deadline passed during the pause: the expiry route now, not at a sweep.
        expire_one(tx, approval.pk, waiting.pk, actor=actor)
    else:
        # Decided (or expired) while the run was paused: its route is taken now.
        decision = Decision(
            approval.pk,
            approval.step_id,
            approval.status,
            actor,
            output={"decision": approval.status.lower()},
            recorded=True,
        )
        store().decide(tx, decision)
    return True


def _unknown_step(run: Run) -> Step | None:
    return (
        Step.objects.filter(run=run, generation=run.generation, status=StepStatus.UNKNOWN)
        .order_by("-seq")
        .first()
    )


def _mark_unknown_done(run: Run, takeover, actor: str, note: dict[str, Any], result) -> None:
    """``mark_done`` on an unknown outcome is ``resolve_unknown(outcome="done")``: the
    operation is recorded as done and the step re-runs, reusing it."""
    if not note.get("evidence"):
        raise ControlError(
            "evidence_required", "mark_done needs evidence", {"evidence": "required"}
        )
    step = _unknown_step(run)
    if step is None:
        raise ControlError("nothing_unknown", "the run has no step with an unknown outcome")
    resolve_unknown(
        run,
        step.name,
        outcome="done",
        evidence=note["evidence"],
        actor=actor,
        result=result,
        against_verify="against_verify" in note,
    )
    record_event(
        run.pk,
        "takeover.resolved",
        {**note, "takeover_id": takeover.pk},
        step_id=step.pk,
        actor=actor,
    )


def _mark_done(run: Run, takeover, actor: str, note: dict[str, Any], result) -> None:
    """``mark_done``: the operator says the step's work is done (``evidence`` says how
    they know). The step becomes SUCCEEDED with ``result`` as output (a FAILED step gets a
    new SUCCEEDED row: failed attempts stay visible), a checkpoint is saved, and the run
    continues with the next step."""
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
        store().resolve(tx, Resolution(actor, note, takeover))
        output = result if result is not None else {"marked_done": True}
        payload = {"reason": note["reason"], "evidence": note["evidence"]}
        if step.status == StepStatus.FAILED:
            done = Step.objects.create(
                run_id=run.pk,
                name=step.name,
                seq=tx.next_step_seq(),
                generation=tx.run.generation,
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
        tx.advance(
            done,
            output=output,
            next_name=workflow.next_after(step.name),
            actor=actor,
            reason=note["reason"],
        )
