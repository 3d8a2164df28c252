"""Compensation: undoing the effects of completed steps when a
run fails or is cancelled.

``compensate_run`` walks the run's completed steps in reverse order and calls each
step's declared ``compensate(ctx, output)``. Compensating calls go through the ledger
(keys ``<step key>:compensate:<action>``), so running the pass again after a crash
reuses what already happened and calls the rest once. A step's own non-read operations
become COMPENSATED when its compensation succeeds. Steps declared ``compensable=False``,
completed side effects with no compensation, failed compensations and unknown outcomes
are listed for manual review (``Run.compensation["manual_review"]``).

One pass at a time per run: a maintenance lease ``compensate:<run id>`` (renewed while
the pass runs). A pass interrupted by a dead process leaves ``compensation_status``
PENDING; the sweeper task ``compensations`` (also run by every worker's start-up
recovery) picks it up once the lease has expired.
"""

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from runs.engine.effects import ledger
from runs.engine.errors import LeaseLost, OutcomeUnknown, StepError
from runs.engine.execution import sweeper
from runs.engine.execution.step_context import perform_call
from runs.engine.state.gateway import RunTx, run_transaction, transition_operations
from runs.models import Operation, Run, Step
from runs.states import STEP_COMPLETED, CompensationStatus, StepStatus
from runs.tools import Tool
from runs.workflows import registry

logger = logging.getLogger("agentops.compensation")

PENDING, DONE, REVIEW = (
    CompensationStatus.PENDING,
    CompensationStatus.DONE,
    CompensationStatus.REVIEW,
)


@dataclass
class CompensationReport:
    """What one pass did. ``status``: ``""`` (nothing to compensate), ``DONE``,
    ``REVIEW`` (done, with items for manual review) or ``BUSY`` (another process holds
    the pass; nothing done here). ``steps``: ``[{"step", "seq", "status", "detail"}]``
    in the order handled (status COMPENSATED, FAILED or MANUAL_REVIEW);
    ``manual_review``: ``[{"step", "reason", "operations": [...]}]``."""

    status: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    manual_review: list[dict[str, Any]] = field(default_factory=list)


class CompensationContext:
    """What a ``compensate(ctx, output)`` function receives: ``run``, ``step`` (the step
    being undone), ``input`` (the run's input), ``output`` (the step's output) and
    ``call_tool`` through the ledger. Compensations are not limited by the run's budget
    (undoing must not be blocked by it), but their calls are counted. ``timeout``: the
    seconds a call may take when its tool sets none (the undone step's ``timeout``)."""

    def __init__(self, run: Run, step: Step, actor: str, timeout: float | None = None):
        self.run = run
        self.step = step
        self.actor = actor
        self.timeout = timeout
        self.input = run.input
        self.output = step.output
        self.call_positions = ledger.CallPositions()

    def call_tool(self, tool: Tool, arguments: dict[str, Any], *, action: str | None = None):
        """Call ``tool`` once per compensation action (default action: the tool name)
        and position among this compensation's calls of that action."""
        action = action or tool.name
        key = self.call_positions.key_for(compensation_key(self.run.pk, self.step, action))
        return perform_call(
            run=self.run,
            step=self.step,
            attempt=None,
            actor=self.actor,
            tool=tool,
            arguments=arguments,
            key=key,
            action=action,
            budget={},
            timeout=tool.timeout or self.timeout,
        )


def compensation_key(run_id, step: Step, action: str) -> str:
    """The ledger key of one compensating action of ``step``."""
    return (
        ledger.idempotency_key(run_id, step.generation, ledger.step_scope(step), "compensate")
        + ":"
        + action
    )


def needs_compensation(run: Run) -> bool:
    """Whether a failed/cancelled ``run`` may have anything to undo or review: its
    workflow declares compensations or non-compensable steps, or it has non-read
    operations that took effect (or may have)."""
    try:
        workflow = registry.get(run.workflow, run.workflow_version)
    except registry.UnknownWorkflow:
        return True
    if any(s.compensate is not None or not s.compensable for s in workflow.steps):
        return True
    return (
        Operation.objects.filter(run_id=run.pk)
        .exclude(side_effect__in=ledger.NO_OUTSIDE_EFFECT)
        .filter(
            status__in=[
                Operation.Status.SUCCEEDED,
                Operation.Status.UNKNOWN,
                Operation.Status.INTENT,
            ]
        )
        .exists()
    )


def schedule(tx: RunTx, *, actor: str, reason: str) -> None:
    """Inside the transaction that fails the run: mark its compensation PENDING and run
    the pass right after commit in this process (the sweeper retries it if this
    process dies first)."""
    if not needs_compensation(tx.run):
        return
    tx.set_compensation(PENDING, compensation={"reason": reason})
    tx.event("compensation.scheduled", {"reason": reason}, actor=actor)
    run_id = tx.run.pk

    def after_commit() -> None:
        try:
            compensate_run(Run.objects.get(pk=run_id), actor=actor, reason=reason)
        except Exception:  # noqa: BLE001 - the sweeper retries a PENDING compensation
            logger.exception("compensation of run %s failed; the sweeper will retry", run_id)

    transaction.on_commit(after_commit)


def compensate_run(run: Run, *, actor: str, reason: str = "") -> CompensationReport:
    """Compensate the run's completed steps in reverse order, once each (see the module
    docstring). Safe to call again after a crash and from several processes: a lease
    makes one pass run at a time, the ledger makes repeated calls reuse results.

    Does not change the run's status (the caller fails or cancels it). Returns the
    report; ``BUSY`` when another process holds the pass.
    """
    if not run.compensation_status and not needs_compensation(run):
        return CompensationReport("")
    targets = _completed_steps(run)
    review_ops = _unsettled_operations(run)
    if not targets and not review_ops and not run.compensation_status:
        return CompensationReport("")
    lease_name = f"compensate:{run.pk}"
    ttl = settings.AGENTOPS_LEASE_SECONDS
    if not sweeper.acquire_maintenance_lease(lease_name, actor, ttl):
        return CompensationReport("BUSY")
    renewer = _LeaseRenewer(lease_name, actor, ttl)
    renewer.start()
    try:
        return _pass(run, targets, review_ops, actor=actor, reason=reason)
    finally:
        renewer.stop()
        _release_lease(lease_name, actor)


def _pass(
    run: Run, targets: list[Step], review_ops: list[Operation], *, actor: str, reason: str
) -> CompensationReport:
    run.refresh_from_db()
    state = dict(run.compensation or {})
    done_before = {e["seq"]: e for e in state.get("steps", []) if e.get("status") == "COMPENSATED"}
    reason = reason or state.get("reason", "")
    with run_transaction(run.pk) as tx:
        tx.set_compensation(PENDING)
        tx.event(
            "compensation.started",
            {"reason": reason, "steps": [s.name for s in targets]},
            actor=actor,
        )
    try:
        workflow = registry.get(run.workflow, run.workflow_version)
    except registry.UnknownWorkflow:
        workflow = None
    report = CompensationReport(DONE)
    for step in targets:
        if step.seq in done_before:
            report.steps.append(done_before[step.seq])
            continue
        step_def = workflow.get(step.name) if workflow and workflow.has(step.name) else None
        if step_def is not None and step_def.kind == "map" and step.position is None:
            # A map step's row holds its branches' results: each branch is undone itself.
            continue
        effects = _effects(step)
        if step_def is None or step_def.compensate is None:
            if step_def is not None and step_def.compensable and not effects:
                continue  # nothing happened outside: nothing to undo
            why = _review_reason(run, step, step_def)
            entry = {"step": step.name, "seq": step.seq, "status": "MANUAL_REVIEW", "detail": why}
            report.manual_review.append(
                {
                    "step": step.name,
                    "reason": why,
                    "operations": [ledger.describe(op) for op in effects],
                }
            )
        else:
            entry = _compensate_step(run, step, step_def, actor)
            if entry["status"] != "COMPENSATED":
                report.manual_review.append(
                    {
                        "step": step.name,
                        "reason": entry["detail"],
                        "operations": [ledger.describe(op) for op in effects],
                    }
                )
        report.steps.append(entry)
        _save_progress(run, report, reason, actor, entry)
    for op in review_ops:
        report.manual_review.append(
            {
                "step": op.step.name if op.step else "",
                "operations": [ledger.describe(op)],
                "reason": f"operation {op.status} in a step that did not "
                "complete: check it by hand",
            }
        )
    report.status = REVIEW if report.manual_review else DONE
    with run_transaction(run.pk) as tx:
        tx.set_compensation(
            report.status,
            compensation={
                "reason": reason,
                "steps": report.steps,
                "manual_review": report.manual_review,
            },
        )
        tx.event(
            "compensation.finished",
            {
                "status": report.status,
                "reason": reason,
                "compensated": [e["step"] for e in report.steps if e["status"] == "COMPENSATED"],
                "manual_review": [m["step"] for m in report.manual_review],
            },
            actor=actor,
        )
    return report


def _review_reason(run: Run, step: Step, step_def) -> str:
    """Why a completed step without a compensation goes to manual review."""
    if step_def is None:
        return f"this code has no step {step.name} in {run.workflow}@{run.workflow_version}"
    if not step_def.compensable:
        return "declared non-compensable"
    return "no compensation declared for its side effects"


def _compensate_step(run: Run, step: Step, step_def, actor: str) -> dict[str, Any]:
    """Run one step's compensation; returns its report entry."""
    ctx = CompensationContext(run, step, actor, timeout=step_def.timeout)
    try:
        step_def.compensate(ctx, step.output)
    except OutcomeUnknown as exc:
        return {
            "step": step.name,
            "seq": step.seq,
            "status": "FAILED",
            "detail": f"compensation outcome unknown: {exc.reason} ({exc.evidence})",
        }
    except (StepError, LeaseLost) as exc:
        return {
            "step": step.name,
            "seq": step.seq,
            "status": "FAILED",
            "detail": f"compensation failed: {exc}",
        }
    except Exception as exc:  # noqa: BLE001 - a bug in a compensation goes to a human
        logger.exception("compensation of %s raised", step.name)
        return {
            "step": step.name,
            "seq": step.seq,
            "status": "FAILED",
            "detail": f"compensation raised {type(exc).__name__}: {exc}",
        }
    prefix = compensation_key(run.pk, step, "")
    transition_operations(
        Operation.objects.filter(step=step, status=Operation.Status.SUCCEEDED)
        .exclude(side_effect__in=ledger.NO_OUTSIDE_EFFECT)
        .exclude(idempotency_key__startswith=prefix),
        Operation.Status.COMPENSATED,
    )
    return {"step": step.name, "seq": step.seq, "status": "COMPENSATED", "detail": ""}


def _save_progress(
    run: Run, report: CompensationReport, reason: str, actor: str, entry: dict[str, Any]
) -> None:
    """Persist each finished step at once, so a pass resumed after a crash skips it."""
    with run_transaction(run.pk) as tx:
        Run.objects.filter(pk=run.pk).update(
            compensation={
                "reason": reason,
                "steps": report.steps,
                "manual_review": report.manual_review,
            }
        )
        tx.event(
            "compensation.step",
            {"step": entry["step"], "status": entry["status"], "detail": entry["detail"]},
            step_id=None,
            actor=actor,
        )


def _completed_steps(run: Run) -> list[Step]:
    """Steps whose work completed, newest first: SUCCEEDED ones, and SUPERSEDED ones that
    had finished without error before a resume replaced them (their effects are real)."""
    steps = Step.objects.filter(run_id=run.pk, status__in=STEP_COMPLETED)
    return [
        s
        for s in steps.order_by("-generation", "-seq")
        if s.status == StepStatus.SUCCEEDED or (s.finished_at and not s.error_code)
    ]


def _effects(step: Step) -> list[Operation]:
    """The step's non-read operations that took effect (compensations excluded)."""
    return list(
        Operation.objects.filter(step=step, status=Operation.Status.SUCCEEDED)
        .exclude(side_effect__in=ledger.NO_OUTSIDE_EFFECT)
        .exclude(idempotency_key__contains=":compensate:")
        .order_by("pk")
    )


def _unsettled_operations(run: Run) -> list[Operation]:
    """Non-read operations of steps that did not complete but that took effect or may
    have (SUCCEEDED, INTENT, UNKNOWN): nobody knows how to undo a half-done step.
    Results carried over from an earlier run or generation (``reused_from``) are left
    out: their effect is the earlier run's, reviewed with it."""
    return list(
        Operation.objects.filter(run_id=run.pk, reused_from__isnull=True)
        .exclude(side_effect__in=ledger.NO_OUTSIDE_EFFECT)
        .exclude(idempotency_key__contains=":compensate:")
        .exclude(step__status__in=STEP_COMPLETED)
        .filter(
            status__in=[
                Operation.Status.SUCCEEDED,
                Operation.Status.INTENT,
                Operation.Status.UNKNOWN,
            ]
        )
        .select_related("step")
        .order_by("pk")
    )


class _LeaseRenewer:
    """Renews the pass's maintenance lease every third of its length."""

    def __init__(self, name: str, owner: str, ttl: float):
        self.name, self.owner, self.ttl = name, owner, ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="compensation-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.ttl + 5)

    def _loop(self) -> None:
        try:
            while not self._stop.wait(max(0.05, self.ttl / 3)):
                sweeper.acquire_maintenance_lease(self.name, self.owner, self.ttl)
        except Exception:  # noqa: BLE001 - a lost renewal only risks a second, idempotent pass
            logger.warning("could not renew %s", self.name, exc_info=True)
        finally:
            connection.close()


def _release_lease(name: str, owner: str) -> None:
    from runs.models import MaintenanceLease

    MaintenanceLease.objects.filter(name=name, owner=owner).update(lease_until=None, owner="")


def sweep_compensations(actor: str, batch: int) -> int:
    """Sweeper task: run the PENDING compensation passes nobody is running (a process
    died mid-pass, or never started it). Returns how many passes completed."""
    done = 0
    for run in Run.objects.filter(compensation_status=PENDING).order_by("updated_at")[:batch]:
        report = compensate_run(run, actor=actor)
        if report.status not in ("BUSY", PENDING):
            done += 1
    return done
