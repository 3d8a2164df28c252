"""A cancel request cancels a fan-out's idle branches in one UPDATE per map step, with
one event naming the count, and the run ends CANCELLED."""

import pytest

from runs.engine.control.cancel import request_cancel
from runs.engine.control.lifecycle import start_run
from runs.models import Event, Step
from runs.states import StepStatus
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
