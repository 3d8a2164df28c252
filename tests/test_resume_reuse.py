"""A resume from a checkpoint reuses the side effects the superseded steps recorded
SUCCEEDED, says so in its preview (each operation with its recorded result), and
re-executes them only when asked, with a reason that the event records."""

import pytest

from lab.sim import devices
from runs.engine.control.lifecycle import ControlError
from runs.engine.control.rewind import plan_resume, resume_from_checkpoint
from runs.models import Event, Operation, Run
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_in_process

pytestmark = pytest.mark.django_db(transaction=True)


def calls(device, op: str, run: Run) -> int:
    return sum(
        1 for c in device.snapshot()["calls"] if c["op"] == op and c["run_id"] == str(run.pk)
    )


@pytest.fixture
def reserved_report(waiting_report):
    """``waiting_report``, its publication reserved once on the way."""
    assert calls(devices.publisher, "publisher.reserve", waiting_report) == 1
    return waiting_report


def test_it_reuses_the_recorded_reservation_by_default(reserved_report):
    run = reserved_report
    plan = plan_resume(run, "start")
    [reserve] = plan.operations_reused
    assert reserve["tool"] == "publisher.reserve"
    assert reserve["result"] == {"slot": "2026-W48", "holder": str(run.pk)}
    assert plan.operations_may_repeat == []

    resume_from_checkpoint(run, "start", actor="user:bob", reason="redo the analysis")
    run_worker_in_process()
    assert calls(devices.publisher, "publisher.reserve", run) == 1
    assert calls(devices.newsfeed, "newsfeed.fetch", run) == 2  # reads run again
    carried = Operation.objects.get(run=run, reused_from__isnull=False)
    assert carried.tool == "publisher.reserve" and carried.reused_from.pk == reserve["id"]
    [event] = Event.objects.filter(run=run, type="run.resumed_from_checkpoint")
    assert event.payload["reexecute"] is False
    assert event.payload["operations_reused"] == [reserve["idempotency_key"]]


def test_it_re_executes_only_with_a_reason_and_records_it(reserved_report):
    run = reserved_report
    with pytest.raises(ControlError) as exc:
        resume_from_checkpoint(run, "start", actor="user:bob", reexecute=True)
    assert exc.value.code == "reason_required"
    run.refresh_from_db()
    assert run.generation == 1

    plan = plan_resume(run, "start", reexecute=True)
    assert plan.operations_reused == []
    assert [op["tool"] for op in plan.operations_may_repeat] == ["publisher.reserve"]
    resume_from_checkpoint(
        run, "start", actor="user:bob", reexecute=True, reason="the slot was lost"
    )
    run_worker_in_process()
    assert calls(devices.publisher, "publisher.reserve", run) == 2
    [event] = Event.objects.filter(run=run, type="run.resumed_from_checkpoint")
    assert event.actor == "user:bob"
    assert event.payload["reexecute"] is True and event.payload["reason"] == "the slot was lost"


def test_a_recorded_result_for_other_arguments_is_not_reused(reserved_report):
    run = reserved_report
    plan = plan_resume(run, "start", {"week": "2026-W49"})
    assert [op["tool"] for op in plan.operations_reused] == ["publisher.reserve"]
    resume_from_checkpoint(
        run, "start", actor="user:bob", input_patch={"week": "2026-W49"}, reason="next week"
    )
    run_worker_in_process()
    reserves = [
        c["args"]["week"]
        for c in devices.publisher.snapshot()["calls"]
        if c["op"] == "publisher.reserve" and c["run_id"] == str(run.pk)
    ]
    assert reserves == ["2026-W48", "2026-W49"]
    [declined] = Event.objects.filter(run=run, type="operation.reuse_declined")
    assert declined.payload["recorded"] == {"week": "2026-W48"}
    assert declined.payload["now"] == {"week": "2026-W49"}
    assert not Operation.objects.filter(run=run, reused_from__isnull=False).exists()
