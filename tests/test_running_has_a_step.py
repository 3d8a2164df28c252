"""A control action that makes a run RUNNING leaves it a due step, or refuses: raising the
budget of a run whose budget-exhausted step is FAILED (as older demo data stored it)
schedules that step again, and with no step to go on with the raise is refused
(``nothing_to_resume``) and changes nothing. ``stranded_runs`` (the soak's invariant)
finds a RUNNING run with nothing to run."""

import pytest

from lab.drills.soak import stranded_runs
from runs.engine.control.lifecycle import ControlError
from runs.engine.effects.budget import raise_budget
from runs.models import Event, Run, Step, Takeover
from runs.states import RunStatus, StepStatus
from tests.support.in_process import *  # noqa: F403
from tests.support.states import arrange

pytestmark = pytest.mark.django_db(transaction=True)


def budget_paused() -> tuple[Run, Step]:
    """room_temperature with one model call allowed: the second one pauses it."""
    run = start_room_temperature(budget={"model_calls": 1})  # noqa: F405
    run_worker_in_process()  # noqa: F405
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED
    takeover = Takeover.objects.get(run=run, status=Takeover.Status.OPEN)
    assert takeover.cause == "budget_exhausted"
    return run, Step.objects.get(pk=takeover.step_id)


def test_raising_the_budget_dispatches_the_step_that_ran_out():
    run, step = budget_paused()
    assert step.status == StepStatus.PENDING

    raise_budget(run, actor="cli", add_model_calls=1, reason="approved")

    assert stranded_runs([run.pk]) == []
    run_worker_in_process()  # noqa: F405
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED


def test_raising_the_budget_schedules_a_failed_step_again():
    run, step = budget_paused()
    arrange(Step.objects.filter(pk=step.pk), status=StepStatus.FAILED)

    raise_budget(run, actor="cli", add_model_calls=1, reason="approved")

    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert stranded_runs([run.pk]) == []
    again = Step.objects.filter(run=run, name=step.name).order_by("seq").last()
    assert again is not None and again.pk != step.pk and again.status == StepStatus.PENDING
    assert Event.objects.filter(run=run, type="step.retry_requested").count() == 1
    run_worker_in_process()  # noqa: F405
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED


def test_raising_the_budget_with_no_step_to_go_on_is_refused_and_changes_nothing():
    run, step = budget_paused()
    arrange(Step.objects.filter(pk=step.pk), status=StepStatus.SUCCEEDED)
    before = Run.objects.get(pk=run.pk)

    with pytest.raises(ControlError) as refused:
        raise_budget(run, actor="cli", add_model_calls=1, reason="approved")

    assert refused.value.code == "nothing_to_resume"
    after = Run.objects.get(pk=run.pk)
    assert (after.status, after.budget, after.event_seq) == (
        RunStatus.PAUSED,
        before.budget,
        before.event_seq,
    )
    assert Takeover.objects.filter(run=run, status=Takeover.Status.OPEN).count() == 1


def test_it_finds_a_running_run_with_nothing_to_run():
    run, step = budget_paused()
    arrange(Run.objects.filter(pk=run.pk), status=RunStatus.RUNNING)
    assert stranded_runs([run.pk]) == []  # its PENDING step will run
    arrange(Step.objects.filter(pk=step.pk), status=StepStatus.FAILED)
    assert stranded_runs([run.pk]) == [(run.pk, "room_temperature")]
