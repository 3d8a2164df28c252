"""A cancel request cancels a fan-out's idle branches in one UPDATE per map step, with
one event naming the count, and the run ends CANCELLED; one that comes while the map
step runs ``over(ctx)`` cancels the step instead of its fan-out."""

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from runs.engine.control import branches
from runs.engine.control.cancel import request_cancel
from runs.engine.control.lifecycle import start_run
from runs.models import Event, Run, Step
from runs.states import RunStatus, StepStatus
from runs.workflows import registry
from tests.support.states import arrange

pytestmark = pytest.mark.django_db

BRANCHES = 2_000


def test_a_cancel_request_cancels_two_thousand_idle_branches_in_one_update():
    run = start_run("fanout_demo", thread_id="fan-cancel", input={"items": BRANCHES, "delay_s": 0})
    parent = Step.objects.get(run=run)
    arrange(Step.objects.filter(pk=parent.pk), status=StepStatus.WAITING)
    Step.objects.bulk_create(
        Step(run=run, name="fetch", seq=2 + i, branch_of=parent, position=i, input={"item": i})
        for i in range(BRANCHES)
    )

    run = request_cancel(run, actor="alice", reason="enough")

    assert run.status == "CANCELLED"
    statuses = set(Step.objects.filter(run=run).values_list("status", flat=True))
    assert statuses == {StepStatus.CANCELLED}
    events = list(Event.objects.filter(run=run).values_list("type", "step_id", "payload"))
    assert [(t, s, p["count"]) for t, s, p in events if t == "step.branches_cancelled"] == [
        ("step.branches_cancelled", parent.pk, BRANCHES)
    ]
    # The map step's own row is cancelled as any idle step; no event per branch.
    assert [s for t, s, _ in events if t == "step.cancelled"] == [parent.pk]


def test_a_cancel_requested_while_the_map_step_runs_over_cancels_it_and_makes_no_branch():
    run = start_run("fanout_demo", thread_id="fan-over", input={"items": 3, "delay_s": 0})
    parent = Step.objects.get(run=run)
    arrange(
        Step.objects.filter(pk=parent.pk),
        status=StepStatus.RUNNING,
        attempt=1,
        owner="w1",
        lease_until=timezone.now() + timedelta(minutes=5),
    )
    arrange(Run.objects.filter(pk=run.pk), status=RunStatus.RUNNING)
    assert request_cancel(run, actor="alice", reason="enough").status == "CANCEL_REQUESTED"
    parent.refresh_from_db()
    ctx = SimpleNamespace(
        run=Run.objects.get(pk=run.pk),
        step=parent,
        attempt=1,
        workflow=registry.get("fanout_demo"),
    )

    branches.commit_fan_out(ctx, [1, 2, 3], "w1")

    parent.refresh_from_db()
    assert (parent.status, parent.owner) == (StepStatus.CANCELLED, "")
    assert not Step.objects.filter(run=run, branch_of__isnull=False).exists()
    reasons = [
        p["reason"]
        for t, p in Event.objects.filter(run=run, step=parent).values_list("type", "payload")
        if t == "step.cancelled"
    ]
    assert reasons == ["cancel requested before the fan-out"]
