"""Cancellation as a flow:

CANCEL_REQUESTED -> no new step is dispatched (open PENDING/WAITING/UNKNOWN steps are
cancelled at once, pending approvals too) -> a RUNNING step sees the request at its
next heartbeat or safe point and stops, releasing its lease (a step that cannot be
interrupted finishes and its result is kept) -> compensations of completed steps ->
CANCELLED. Completed artifacts are kept. A result arriving after CANCELLED is rejected
by the fenced commit (``step.commit_rejected``) and changes nothing.

``finish_cancel`` is safe to call from anywhere at any time (the worker after its step
stopped, the canceller, the sweeper for a worker that died): it only acts once no step
holds a live lease, and a per-run maintenance lease keeps compensations to one process.
"""

import uuid

from django.conf import settings
from django.db.models.functions import Now

from runs.engine.control.refusals import ControlError, require_reason
from runs.engine.effects.compensation import compensate_run
from runs.engine.execution.sweeper import acquire_maintenance_lease
from runs.engine.state.gateway import run_transaction
from runs.engine.state.store import store
from runs.engine.state.store_interface import Resolution
from runs.models import MaintenanceLease, Run, Step
from runs.states import RUN_TERMINAL, STEP_IDLE_OPEN, RunStatus, StepStatus

#: What operators see while an uninterruptible step finishes.
WAITING_MESSAGE = "cancel requested, waiting for the current operation"


def request_cancel(run: Run, *, actor: str, reason: str) -> Run:
    """Ask ``run`` to cancel; works from every non-terminal state (PENDING, RUNNING,
    WAITING_APPROVAL, WAITING_EXTERNAL, PAUSED). Asking again is a no-op.

    Returns the run as it is afterwards: CANCELLED when nothing was running, else
    CANCEL_REQUESTED with a ``run.cancel_waiting`` event naming the running step (the
    worker finishes the flow). Raises ``ControlError``: ``reason_required`` (a blank
    ``reason``), ``run_terminal``.
    """
    require_reason(reason, "cancel")
    with run_transaction(run.pk) as tx:
        if tx.run.status in RUN_TERMINAL:
            raise ControlError("run_terminal", f"run is {tx.run.status}; nothing to cancel")
        if tx.run.status != RunStatus.CANCEL_REQUESTED:
            tx.transition_run(
                RunStatus.CANCEL_REQUESTED,
                actor=actor,
                reason=reason,
                cancel_requested_at=Now(),
                cancel_reason=reason,
                updated_at=Now(),
            )
            # A fan-out's idle branches (up to 10,000) go in one UPDATE per map step.
            for parent_id in (
                Step.objects.filter(
                    run_id=run.pk, branch_of__isnull=False, status__in=STEP_IDLE_OPEN
                )
                .values_list("branch_of_id", flat=True)
                .distinct()
            ):
                tx.cancel_branches(parent_id, actor=actor, reason=reason, statuses=STEP_IDLE_OPEN)
            for step_id, status in Step.objects.filter(
                run_id=run.pk, status__in=STEP_IDLE_OPEN
            ).values_list("pk", "status"):
                tx.transition_step(
                    step_id,
                    StepStatus.CANCELLED,
                    expected=status,
                    actor=actor,
                    payload={"reason": reason, "from": status},
                    owner="",
                    lease_until=None,
                    finished_at=Now(),
                )
            tx.cancel_pending_approvals(
                actor=actor, reason=reason, comment=f"run cancelled: {reason}"
            )
            resolution = Resolution(actor, {"action": "cancel", "reason": reason, "evidence": ""})
            store().resolve(tx, resolution)
            if tx.run.pause_requested_at is not None:
                tx.clear_pause_request()  # the cancel overtakes it
            running = Step.objects.filter(run_id=run.pk, status=StepStatus.RUNNING).first()
            if running is not None:
                tx.event(
                    "run.cancel_waiting",
                    {"step": running.name, "worker": running.owner, "message": WAITING_MESSAGE},
                    step_id=running.pk,
                    actor=actor,
                )
    finish_cancel(run.pk, actor=actor)
    run.refresh_from_db()
    return run


def cancel_progress(run: Run) -> str:
    """One line for people: where the cancel flow of ``run`` stands."""
    if run.status == RunStatus.CANCELLED:
        return "cancelled"
    if run.status != RunStatus.CANCEL_REQUESTED:
        return run.status.lower()
    running = Step.objects.filter(run_id=run.pk, status=StepStatus.RUNNING).first()
    if running is not None:
        return f"{WAITING_MESSAGE} (step {running.name} on {running.owner or 'a worker'})"
    return "cancel requested, running compensations"


def finish_cancel(run_id, *, actor: str) -> bool:
    """Complete the flow of a CANCEL_REQUESTED run once no step holds a live lease: steps
    whose lease expired are cancelled (fenced), compensations run (outside any
    transaction), the run becomes CANCELLED. Returns ``True`` when the run is CANCELLED
    afterwards; ``False`` when it is waiting for a running step, another process is
    finishing it, or the run is in another state."""
    with run_transaction(run_id) as tx:
        if tx.run.status != RunStatus.CANCEL_REQUESTED:
            return tx.run.status == RunStatus.CANCELLED
        if Step.objects.filter(
            run_id=run_id, status=StepStatus.RUNNING, lease_until__gte=Now()
        ).exists():
            return False
        for step_id, attempt, owner in Step.objects.filter(
            run_id=run_id, status=StepStatus.RUNNING
        ).values_list("pk", "attempt", "owner"):
            tx.transition_step(
                step_id,
                StepStatus.CANCELLED,
                expected=StepStatus.RUNNING,
                attempt=attempt,
                actor=actor,
                payload={
                    "attempt": attempt,
                    "owner": owner,
                    "reason": "lease expired while cancel requested",
                },
                owner="",
                lease_until=None,
                finished_at=Now(),
            )
    lease_name = f"cancel:{run_id}"
    holder = f"{actor}:{uuid.uuid4().hex[:8]}"
    if not acquire_maintenance_lease(
        lease_name, holder, max(60.0, settings.AGENTOPS_LEASE_SECONDS * 3)
    ):
        return False
    try:
        outcome = _compensate(Run.objects.get(pk=run_id), actor)
        if outcome is None:
            return False
        with run_transaction(run_id) as tx:
            if tx.run.status != RunStatus.CANCEL_REQUESTED:
                return tx.run.status == RunStatus.CANCELLED
            tx.transition_run(
                RunStatus.CANCELLED,
                actor=actor,
                reason=tx.run.cancel_reason,
                payload={"compensation": outcome},
                finished_at=Now(),
                current_step=None,
            )
            return True
    finally:
        MaintenanceLease.objects.filter(name=lease_name, owner=holder).delete()


def _compensate(run: Run, actor: str) -> dict | None:
    """Run the compensations of the run's completed steps (``compensate_run``: reverse
    order, once each through the ledger). Returns the report for the CANCELLED event, or
    ``None`` while another process holds the compensation pass (finish later). A failing
    compensation is in the report (for manual review); the cancel still completes, so an
    operator sees it instead of a run stuck in CANCEL_REQUESTED."""
    report = compensate_run(run, actor=actor, reason=f"cancelled: {run.cancel_reason}")
    if report.status == "BUSY":
        return None
    return {
        "status": report.status or "nothing to compensate",
        "steps": report.steps,
        "manual_review": report.manual_review,
    }


def finish_requested_cancels(actor: str, batch: int) -> int:
    """Sweeper task: finish CANCEL_REQUESTED runs whose running step's worker died (its
    lease expired) or whose finisher died. Returns how many became CANCELLED."""
    ids = list(
        Run.objects.filter(status=RunStatus.CANCEL_REQUESTED)
        .order_by("cancel_requested_at")
        .values_list("pk", flat=True)[:batch]
    )
    return sum(1 for run_id in ids if finish_cancel(run_id, actor=actor))
