"""Pausing a run for a human: the run goes PAUSED and one Takeover row says why, what
was done, where it failed, what to do next, and which checkpoints it can resume from."""

from django.db.models.functions import Now

from runs.engine.state.gateway import RunTx
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
    # The rule the resume preview offers: run order, named as a resume names them.
    from runs.engine.control.rewind import resumable_names

    fields = {
        "step": step,
        "cause": cause,
        "reason": reason,
        "done_summary": {"completed_steps": completed, "artifacts": artifacts},
        "failed_at": step.name if step else "",
        "suggested_action": suggested_action,
        "evidence": evidence or {},
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
