"""The run page's summary of its map steps: for each step that fanned out, how many
branches it has in each state, counted by one grouped query whatever their number
(the page lists the branch rows themselves in its paged steps section)."""

from typing import Any

from runs.engine.service import branch_counts
from runs.models import Run, Step
from runs.states import StepStatus


def fan_outs(run: Run) -> list[dict[str, Any]]:
    """``[{"step_id", "name", "seq", "generation", "status", "total", "counts":
    [(status, n), ...]}]``: the run's map steps that fanned out, in run order, each with
    its branches counted by state (in ``StepStatus`` order, states with none left
    out). Two queries: the counts, then the fanned-out steps they belong to."""
    counted = branch_counts(run.pk)
    if not counted:
        return []
    parents = Step.objects.filter(pk__in=counted).order_by("seq")
    return [
        {
            "step_id": p.pk,
            "name": p.name,
            "seq": p.seq,
            "generation": p.generation,
            "status": p.status,
            "total": sum(counted[p.pk].values()),
            "counts": [(s, counted[p.pk][s]) for s in StepStatus.values if s in counted[p.pk]],
        }
        for p in parents.only("pk", "name", "seq", "generation", "status")
    ]
