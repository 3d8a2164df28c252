"""The names of a run's checkpoints as operators see and give them: unique within the
run, in run order, and which a resume may start from. A read of its own so that opening
a takeover (which lists them) does not import the resume that uses them."""

from typing import Any

from django.db.models import Count

from runs.checkpoint_data import DELTA
from runs.models import Checkpoint, Run
from runs.states import StepStatus


def checkpoint_labels(run: Run, checkpoints) -> dict[int, str]:
    """``{checkpoint pk: unique name}`` for ``checkpoints`` of ``run``: a name the run
    saved more than once (every iteration of a ``goto`` loop saves ``after:think``) gets
    the seq of the step that saved it, ``after:think#7``; a name saved once stays as it
    is. ``find_checkpoint`` accepts both forms."""
    checkpoints = list(checkpoints)
    names = {cp.name for cp in checkpoints}
    repeated = {
        row["name"]
        for row in Checkpoint.objects.filter(run=run, name__in=names)
        .values("name")
        .annotate(n=Count("pk"))
        .order_by()
        if row["n"] > 1
    }
    labels = {}
    for cp in checkpoints:
        if cp.name in repeated:
            labels[cp.pk] = f"{cp.name}#{cp.step.seq if cp.step else cp.pk}"
        else:
            labels[cp.pk] = cp.name
    return labels


def list_checkpoints(
    run: Run, *, after: int | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """The run's checkpoints, oldest first: ``[{"id", "name", "generation",
    "created_at", "step", "next_step", "resumable"}]``; ``name`` is unique within the
    run (``checkpoint_labels``), and resumable ones can be named in a resume (their step
    is not superseded and they have a next step). ``after`` (an ``id``) and ``limit``
    page through a long run without loading every checkpoint's state."""
    query = Checkpoint.objects.filter(run=run)
    if after is not None:
        query = query.filter(pk__gt=after)
    query = query.select_related("step").defer("data").order_by("pk")
    page = list(query[:limit] if limit is not None else query)
    # A delta checkpoint always carries its phase in "set" (runs.checkpoint_data).
    phases = {
        pk: delta_phase if version == DELTA else whole_phase
        for pk, version, whole_phase, delta_phase in Checkpoint.objects.filter(
            pk__in=[cp.pk for cp in page]
        ).values_list("pk", "version", "data__phase", "data__set__phase")
    }
    labels = checkpoint_labels(run, page)
    return [
        {
            "id": cp.pk,
            "name": labels[cp.pk],
            "generation": cp.generation,
            "created_at": cp.created_at.isoformat(),
            "step": cp.step.name if cp.step else None,
            "next_step": phases.get(cp.pk),
            "resumable": usable(cp) and phases.get(cp.pk) is not None,
        }
        for cp in page
    ]


def resumable_names(run: Run) -> list[str]:
    """The names of ``run``'s checkpoints a resume can start from, in run order (the
    order they were saved), each unique (``checkpoint_labels``)."""
    return [cp["name"] for cp in list_checkpoints(run) if cp["resumable"]]


def usable(cp: Checkpoint) -> bool:
    """Whether a resume may start from ``cp``: its step (if any) is not SUPERSEDED."""
    return cp.step is None or cp.step.status != StepStatus.SUPERSEDED
