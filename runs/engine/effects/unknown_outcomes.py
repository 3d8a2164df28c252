"""Unknown outcomes: a side effect that may or may not have
happened, which its tool's ``verify`` hook could not decide.

The step becomes UNKNOWN, the run PAUSED, and a Takeover (cause ``unknown_outcome``)
holds the operation and the evidence. A human then decides with ``resolve_unknown``
(``runs resolve``; the console calls it too): "done" records the result and the
step continues without calling the tool again; "not-done" lets the step call it once
more. ``verify_now`` asks the hook again, for an operator who fixed the device.
"""

import json
from typing import Any

from django.conf import settings
from django.db.models.functions import Now

from runs.engine.control.refusals import MAX_EVIDENCE_CHARS, ControlError, check_length
from runs.engine.control.takeovers import open_takeover
from runs.engine.effects import ledger
from runs.engine.errors import OutcomeUnknown
from runs.engine.rules import check_identifier
from runs.engine.state.gateway import run_transaction, transition_operations
from runs.engine.state.store import store
from runs.engine.state.store_interface import Due, Resolution
from runs.models import Event, Operation, Run, Step
from runs.states import RUN_TERMINAL, RunStatus, StepStatus
from runs.tools import ToolCall, VerifyAnswer, get_tool
from runs.workflows import registry

__all__ = ["VerifyAnswer", "pause_unknown", "verify_now", "resolve_unknown", "OUTCOMES"]

#: ``runs resolve --outcome`` values.
OUTCOMES = ("done", "not-done")


def pause_unknown(run: Run, step: Step, attempt: int, actor: str, exc: OutcomeUnknown) -> bool:
    """Attempt ``attempt`` hit an unknown outcome: mark the step UNKNOWN and the
    operation UNKNOWN, pause the run and open the takeover, all fenced by the attempt.

    Returns ``False`` (recording ``step.commit_rejected``) when the attempt no longer
    holds the step or the run is terminal. A run that is cancel-requested is not paused
    (its cancel flow owns it); the step is still marked UNKNOWN.
    """
    with run_transaction(run.pk) as tx:
        if not tx.finish_attempt(
            step,
            attempt,
            StepStatus.UNKNOWN,
            actor=actor,
            rejected={"error_code": "UNKNOWN_OUTCOME"},
            payload={
                "attempt": attempt,
                "operation_id": exc.operation_id,
                "reason": exc.reason,
                "evidence": exc.evidence[:2000],
            },
            owner="",
            lease_until=None,
            finished_at=Now(),
            error_code="UNKNOWN_OUTCOME",
            error_detail=exc.reason[:4000],
        ):
            return False
        transition_operations(
            Operation.objects.filter(pk=exc.operation_id, status=Operation.Status.INTENT),
            Operation.Status.UNKNOWN,
        )
        op = Operation.objects.get(pk=exc.operation_id)
        if tx.run.status == RunStatus.CANCEL_REQUESTED:
            return True
        open_takeover(
            tx,
            cause="unknown_outcome",
            reason=exc.reason,
            actor=actor,
            step=step,
            suggested_action=(
                f"Check the outside system, then: runs resolve {run.pk} --step {step.name} "
                "--outcome done|not-done --evidence '...'"
            ),
            evidence={"operation": ledger.describe(op), "verify": exc.evidence, "attempt": attempt},
        )
    return True


def operator_verify_timeout(tool) -> float:
    """Seconds an operator's check (``verify_now``) may wait on ``tool``'s ``verify``: the
    tool's own ``timeout`` when it is shorter, else ``AGENTOPS_VERIFY_SECONDS``. The
    check runs in the operator's request, which no step deadline bounds."""
    limit = float(settings.AGENTOPS_VERIFY_SECONDS)
    return min(tool.timeout, limit) if tool.timeout else limit


def verify_now(step: Step, *, actor: str) -> VerifyAnswer:
    """Ask the ``verify`` hook again about the step's unknown operation (for example
    after the operator brought the device back) and record the answer as an event.

    Changes no status: the operator resolves with the answer as evidence. The hook may
    take ``operator_verify_timeout`` seconds; past that the answer is ``cannot_tell``.
    When the call's own result arrived after the pause, the ledger knows: the answer is
    ``done`` with that result, without asking the hook. Raises ``ControlError``
    (``no_unknown_operation``) when the step has no operation it is unknown about.
    """
    op = _unknown_operation(step)
    if op is None:
        raise ControlError("no_unknown_operation", f"step {step.name} has no unknown operation")
    if op.status == Operation.Status.SUCCEEDED:
        answer = VerifyAnswer(
            "done", op.result, evidence="the call's own result arrived after the pause"
        )
        ledger.record_verified(op, answer, step_id=step.pk, actor=actor, requested_by=actor)
        return answer
    run = step.run
    try:
        # Loads a lazily declared workflow, whose module registers its tools.
        registry.get(run.workflow, run.workflow_version)
    except registry.UnknownWorkflow:
        pass
    tool = get_tool(op.tool)
    if tool is None:
        answer = VerifyAnswer("cannot_tell", evidence=f"this code has no tool {op.tool!r}")
    else:
        answer = ledger.verify(
            tool,
            op,
            ToolCall(run_id=str(run.pk), idempotency_key=op.idempotency_key, attempt=op.attempt),
            timeout=operator_verify_timeout(tool),
        )
    ledger.record_verified(op, answer, step_id=step.pk, actor=actor, requested_by=actor)
    return answer


def latest_verify_answers(step_ids) -> dict[int, dict[str, Any]]:
    """The newest answer of the outside world about each of ``step_ids`` (their newest
    ``operation.verified`` events), in one query: ``{step_id: {"answer", "evidence",
    "event_seq"}}``; a step never asked is absent."""
    found: dict[int, dict[str, Any]] = {}
    rows = (
        Event.objects.filter(step_id__in=list(step_ids), type="operation.verified")
        .order_by("step_id", "-seq")
        .values_list("step_id", "seq", "payload")
    )
    for step_id, seq, payload in rows:
        if step_id in found or not isinstance(payload, dict):
            continue
        found[step_id] = {
            "answer": payload.get("answer"),
            "evidence": payload.get("evidence", ""),
            "event_seq": seq,
        }
    return found


def contradicts(answer: dict[str, Any] | None, *, done: bool) -> bool:
    """The rule: resolving a step as ``done`` (True: it happened; False: do it again)
    goes against ``answer`` (``latest_verify_answers``) when the answer says the
    opposite; ``cannot_tell`` and no answer contradict nothing."""
    return answer is not None and answer.get("answer") == ("not_done" if done else "done")


def verify_contradiction(step_id: int, *, done: bool) -> dict[str, Any] | None:
    """The latest verify answer about step ``step_id`` when resolving it as ``done``
    contradicts it (``contradicts``), else ``None``."""
    answer = latest_verify_answers([step_id]).get(step_id)
    return answer if contradicts(answer, done=done) else None


def check_against_verify(step_id: int, *, done: bool, confirmed: bool) -> dict[str, Any] | None:
    """The rule for a resolution that contradicts the latest verify answer: refused
    unless the person ``confirmed`` it (``ControlError("contradicts_verify")``); once
    confirmed, returns the contradicted answer (``verify_contradiction``) for the event
    to record. ``None`` when there is no contradiction."""
    answer = verify_contradiction(step_id, done=done)
    if answer is not None and not confirmed:
        said = "did not happen" if answer["answer"] == "not_done" else "happened"
        raise ControlError(
            "contradicts_verify",
            f"the latest check of the outside world says the call {said} "
            f"({answer['evidence'] or answer['answer']}); confirm to resolve against it",
            {"against_verify": f"verify said {answer['answer']}: confirm to go against it"},
        )
    return answer


def resolve_unknown(
    run: Run,
    step_name: str,
    *,
    outcome: str,
    evidence: str,
    actor: str,
    result: Any = None,
    against_verify: bool = False,
) -> Run:
    """A human's decision on an UNKNOWN step of a PAUSED run; the run then continues.

    ``outcome``: ``"done"`` (the operation becomes SUCCEEDED with ``result``, default
    ``{"resolved": "done"}``; the step re-runs and reuses it without calling the tool)
    or ``"not-done"`` (the operation becomes FAILED; the step re-runs and calls once
    more). ``evidence`` (required) and ``actor`` go into the ``unknown.resolved`` event
    and the takeover's resolution. The step gets a fresh retry allowance.

    Raises ``ControlError``: ``invalid_input`` (a step name that breaks the identifier
    rule, evidence over ``MAX_EVIDENCE_CHARS``), ``invalid_outcome``, ``evidence_required``,
    ``run_terminal``,
    ``not_allowed_in_state``, ``unknown_step``, ``step_not_unknown``, ``outcome_known``
    (a late result arrived: it cannot be "not-done"), ``contradicts_verify`` (the latest
    verify answer says the opposite and ``against_verify`` was not given; with it, the
    event records the answer gone against as ``against_verify``).
    """
    check_identifier(step_name, "step")
    if outcome not in OUTCOMES:
        raise ControlError(
            "invalid_outcome",
            f"outcome must be one of {', '.join(OUTCOMES)}",
            {"outcome": "must be done or not-done"},
        )
    if evidence is None or (isinstance(evidence, str) and not evidence.strip()):
        raise ControlError(
            "evidence_required", "say what you checked (--evidence)", {"evidence": "is required"}
        )
    check_length(evidence, "evidence", MAX_EVIDENCE_CHARS)
    with run_transaction(run.pk) as tx:
        if tx.run.status in RUN_TERMINAL:
            raise ControlError("run_terminal", f"run is {tx.run.status}")
        if tx.run.status != RunStatus.PAUSED:
            raise ControlError(
                "not_allowed_in_state", f"run is {tx.run.status}; only a PAUSED run can be resolved"
            )
        step = (
            Step.objects.filter(run_id=run.pk, generation=tx.run.generation, name=step_name)
            .order_by("-seq")
            .first()
        )
        if step is None:
            raise ControlError("unknown_step", f"run has no step {step_name!r}")
        if step.status != StepStatus.UNKNOWN:
            raise ControlError(
                "step_not_unknown", f"step {step_name} is {step.status}, not UNKNOWN"
            )
        contradicted = check_against_verify(
            step.pk, done=outcome == "done", confirmed=against_verify
        )
        op = _unknown_operation(step)
        settled: dict[str, Any] = {}
        if op is not None:
            if outcome == "done":
                stored = (
                    result
                    if result is not None
                    else (
                        op.result
                        if op.status == Operation.Status.SUCCEEDED
                        else {"resolved": "done"}
                    )
                )
                settled = {"operation_status": Operation.Status.SUCCEEDED}
            elif op.status == Operation.Status.SUCCEEDED:
                raise ControlError(
                    "outcome_known",
                    "the call's result arrived after the pause: "
                    f"it took effect ({json.dumps(op.result)[:200]})",
                )
            else:
                stored = {"resolved": "not_done", "evidence": evidence}
                settled = {"operation_status": Operation.Status.FAILED}
            settled.update(operation=op, operation_result=stored)
        requeued = Due(
            step,
            actor,
            payload={"reason": f"unknown outcome resolved: {outcome}"},
            fields={
                "started_at": None,
                "finished_at": None,
                # A fresh retry allowance.
                "attempt_base": step.attempt,
                "error_code": "",
                "error_detail": "",
            },
        )
        takeover = store().resolve(
            tx,
            Resolution(
                actor,
                {"action": "mark_done" if outcome == "done" else "retry", "reason": evidence},
                record=False,
                due=requeued,
                **settled,
            ),
        )
        tx.event(
            "unknown.resolved",
            {
                "step": step.name,
                "outcome": outcome,
                "evidence": evidence,
                "reason": f"operator decided the outcome was {outcome}",
                "operation": ledger.describe(op) if op else None,
                "result": op.result if op and outcome == "done" else None,
                "takeover_id": takeover.pk if takeover else None,
                **({"against_verify": contradicted} if contradicted else {}),
            },
            step_id=step.pk,
            actor=actor,
        )
        tx.transition_run(
            RunStatus.RUNNING,
            actor=actor,
            reason=f"unknown outcome of {step.name} resolved: {outcome}",
        )
    run.refresh_from_db()
    return run


def _unknown_operation(step: Step) -> Operation | None:
    """The operation the step is unknown about: UNKNOWN first, else an unsettled INTENT,
    else one whose late result arrived (SUCCEEDED)."""
    for status in (Operation.Status.UNKNOWN, Operation.Status.INTENT, Operation.Status.SUCCEEDED):
        op = Operation.objects.filter(step=step, status=status).order_by("-pk").first()
        if op is not None:
            return op
    return None
