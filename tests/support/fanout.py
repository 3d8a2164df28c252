"""A fanned-out run arranged in the database, for the tests of what 10,000 branches cost
a page or a resume: inserting the branch rows in bulk takes a second where working them
would take minutes."""

from collections.abc import Callable

from django.contrib.auth.models import AbstractBaseUser

from runs.engine.control.lifecycle import start_run
from runs.models import Run, Step
from runs.states import StepStatus
from tests.support.states import arrange


def fanned_out_run(
    branches: int,
    status_of: Callable[[int], str],
    *,
    owner: AbstractBaseUser | None = None,
) -> tuple[Run, Step]:
    """A ``fanout_demo`` run (thread ``fan-<branches>``) whose ``fetch`` step fanned out
    into ``branches`` rows: the map step WAITING, branch ``i`` (position ``i``, seq
    ``2 + i``, input ``{"item": i + 1}``) in ``status_of(i)``. Returns ``(run, map
    step)``."""
    run = start_run(
        "fanout_demo",
        thread_id=f"fan-{branches}",
        input={"items": branches, "delay_s": 0},
        owner=owner,
    )
    parent = Step.objects.get(run=run)
    arrange(Step.objects.filter(pk=parent.pk), status=StepStatus.WAITING)
    Step.objects.bulk_create(
        [
            Step(
                run=run,
                name="fetch",
                seq=2 + i,
                branch_of=parent,
                position=i,
                input={"item": i + 1},
                status=status_of(i),
            )
            for i in range(branches)
        ],
        batch_size=2000,
    )
    return run, parent
