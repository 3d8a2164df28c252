"""Pausing a run for a human: the run goes PAUSED and one Takeover row says why, what
was done, where it failed, what to do next, and which checkpoints it can resume from."""

from django.db.models.functions import Now

from runs.engine.control.checkpoint_names import resumable_names
from runs.engine.errors import ControlError
from runs.engine.state.gateway import RunTx, run_transaction
from runs.models import Artifact, Step, Takeover
from runs.states import RunStatus, StepStatus


def open_takeover(
    tx: RunTx,
    *,
    cause: str,
    reason: str,
    actor: str,
    step: Step | None = None,
    suggested_action: str = "",
    evidence: dict | None = None,
):
    """Pause the locked run (``tx``) and open (or update) its one OPEN takeover.

    ``cause`` is a ``runs.models.Takeover.Cause`` value. Returns the Takeover, or
    ``None`` when the run is terminal (nothing to take over; a rejected-transition event
    is recorded instead).
    """
    run = tx.run
    if run.status != RunStatus.PAUSED:
        if not tx.transition_run(
            RunStatus.PAUSED, actor=actor, reason=reason, payload={"cause": cause}, updated_at=Now()
        ):
            return None
    # A map step's branches are counted on it elsewhere, not listed: there may be 10,000.
    completed = list(
        Step.objects.filter(
            run_id=run.pk,
            generation=run.generation,
            status=StepStatus.SUCCEEDED,
            branch_of__isnull=True,
        )
        .order_by("seq")
        .values_list("name", flat=True)
    )
    artifacts = [
        {"id": a.pk, "name": a.name, "size": a.size, "checksum": a.checksum}
        for a in Artifact.objects.filter(run_id=run.pk).order_by("pk")
    ]
    fields = {
        "step": step,
        "cause": cause,
        "reason": reason,
        "done_summary": {"completed_steps": completed, "artifacts": artifacts},
        "failed_at": step.name if step else "",
        "suggested_action": suggested_action,
        "evidence": evidence or {},
        # The rule the resume preview offers: run order, named as a resume names them.
        "checkpoints": resumable_names(run),
    }
    takeover = Takeover.objects.filter(run_id=run.pk, status=Takeover.Status.OPEN).first()
    if takeover is None:
        takeover = Takeover.objects.create(run_id=run.pk, **fields)
    else:
        Takeover.objects.filter(pk=takeover.pk).update(**fields)
    tx.event(
        "takeover.opened",
        {
            "takeover_id": takeover.pk,
            "cause": cause,
            "reason": reason,
            "step": step.name if step else None,
            "suggested_action": suggested_action,
        },
        step_id=step.pk if step else None,
        actor=actor,
    )
    return takeover


def claim_takeover(takeover, user, *, actor: str):
    """``user`` (a Django user) takes the open ``takeover`` on, so two operators do not
    both act; ``takeover.claimed`` is recorded with ``actor``. Claiming again by the same
    user changes nothing. Returns the Takeover as stored. Raises ``ControlError``
    ``takeover_resolved`` (not OPEN any more) or ``already_claimed`` (another user holds
    it). Who may claim is the caller's check."""
    with run_transaction(takeover.run_id) as tx:
        current = Takeover.objects.select_for_update().get(pk=takeover.pk)
        if current.status != Takeover.Status.OPEN:
            raise ControlError("takeover_resolved", f"takeover {current.pk} is already resolved")
        if current.claimed_by_id == user.pk:
            return current
        if current.claimed_by is not None:
            raise ControlError(
                "already_claimed",
                f"takeover {current.pk} is claimed by {current.claimed_by.get_username()}",
            )
        Takeover.objects.filter(pk=current.pk, claimed_by__isnull=True).update(
            claimed_by=user, claimed_at=Now()
        )
        tx.event(
            "takeover.claimed", {"takeover_id": current.pk}, step_id=current.step_id, actor=actor
        )
    current.refresh_from_db()
    return current
