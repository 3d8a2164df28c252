"""Replaying finished runs with real in-process workers and the
simulated outside world: the replay is a new run linked both ways, the original stays
as it was, recorded side effects are reused unless re-executed with a reason."""

import pytest

from agentops.authoring import register
from lab.sim import devices
from runs.engine.control import lifecycle
from runs.engine.control.lifecycle import ControlError
from runs.engine.control.replay import bulk_candidates, bulk_replay, plan_replay, replay_run
from runs.models import Checkpoint, Event, Message, Operation, Run, Step
from runs.states import RUN_TERMINAL
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_in_process, work_until

pytestmark = pytest.mark.django_db(transaction=True)


def finish(run: Run) -> Run:
    """Work the run in this process until it is finished (retries wait out their
    backoff)."""
    return work_until(run, RUN_TERMINAL)


def calls(device, op: str, run: Run) -> int:
    return sum(
        1 for c in device.snapshot()["calls"] if c["op"] == op and c["run_id"] == str(run.pk)
    )


def rows(run: Run) -> dict:
    """Everything stored about ``run`` (to prove nothing changed)."""
    run.refresh_from_db()
    return {
        "run": {f.attname: getattr(run, f.attname) for f in Run._meta.concrete_fields},
        "steps": list(Step.objects.filter(run=run).order_by("seq").values()),
        "events": list(Event.objects.filter(run=run).order_by("seq").values()),
        "ops": list(Operation.objects.filter(run=run).order_by("pk").values()),
        "checkpoints": list(Checkpoint.objects.filter(run=run).order_by("pk").values()),
        "messages": list(Message.objects.filter(run=run).order_by("pk").values()),
    }


def dim_lights(thread: str) -> Run:
    return lifecycle.start_run(
        "dim_lights", thread_id=thread, input={"request": "lower the brightness by 10%"}
    )


def lamp_down(down: bool) -> None:
    with devices.lamp.locked() as data:
        data["state"]["unreadable"] = down


def failed_while_lamp_down(thread: str = "L1") -> Run:
    lamp_down(True)
    run = finish(dim_lights(thread))
    assert run.status == "FAILED"
    return run


def test_it_replays_a_run_failed_while_its_dependency_was_down(actors):
    original = failed_while_lamp_down()
    failed = Step.objects.get(run=original, name="read_lamp")
    assert failed.status == "FAILED" and failed.error_code == "DEPENDENCY_UNAVAILABLE"
    before = rows(original)
    lamp_down(False)

    replay = replay_run(original, actor="user:bob", reason="lamp is back")
    assert replay.replay_of_id == original.pk and replay.replay_checkpoint == "start"
    assert replay.thread_id == original.thread_id
    replay = finish(replay)

    assert replay.status == "SUCCEEDED"
    assert calls(devices.lamp, "lamp.get_brightness", replay) == 1
    assert calls(devices.lamp, "lamp.set_brightness", replay) == 1
    assert rows(original) == before
    assert list(original.replays.all()) == [replay]
    [created] = Event.objects.filter(run=replay, type="run.replay_created")
    assert created.actor == "user:bob"
    assert created.payload["original"] == str(original.pk)
    assert created.payload["checkpoint"] == "start"
    assert created.payload["reason"] == "lamp is back"


def test_it_refuses_a_second_replay_unless_again(actors):
    original = failed_while_lamp_down()
    lamp_down(False)
    replay_run(original, actor="cli", reason="first")
    with pytest.raises(ControlError) as exc:
        replay_run(original, actor="cli", reason="second")
    assert exc.value.code == "already_replayed"
    replay_run(original, actor="cli", reason="second", again=True)
    assert original.replays.count() == 2


def test_it_refuses_live_runs_and_replays_without_a_reason(actors):
    live = dim_lights("L2")
    with pytest.raises(ControlError) as exc:
        replay_run(live, actor="cli", reason="x")
    assert exc.value.code == "run_not_finished"
    original = failed_while_lamp_down("L3")
    with pytest.raises(ControlError) as exc:
        replay_run(original, actor="cli", reason="  ")
    assert exc.value.code == "reason_required"
    with pytest.raises(ControlError) as exc:
        replay_run(original, actor="cli", reason="x", checkpoint="after:nothing")
    assert exc.value.code == "unknown_checkpoint" and "start" in exc.value.errors["checkpoint"]
    assert not original.replays.exists()


def declined_trip() -> Run:
    run = lifecycle.start_run(
        "book_trip", thread_id="B1", input={"guest": "ada", "card": "declined"}
    )
    run = finish(run)
    assert run.status == "FAILED"
    return run


def test_it_reuses_recorded_side_effects_by_default_and_lists_them(actors):
    original = declined_trip()
    plan = plan_replay(original, "after:hold_car")
    [reused] = plan.operations_reused
    assert (reused["tool"], reused["step"], reused["result"]) == (
        "booking.notify",
        "notify_guest",
        {"sent": True},
    )
    assert plan.operations_may_repeat == []
    assert plan.steps_to_run == ["notify_guest", "pay", "confirm"]

    replay = finish(
        replay_run(original, actor="cli", reason="try again", checkpoint="after:hold_car")
    )
    assert calls(devices.booking, "booking.notify", replay) == 0
    assert calls(devices.booking, "booking.pay", replay) == 1
    carried = Operation.objects.get(run=replay, tool="booking.notify")
    assert carried.reused_from.run_id == original.pk and carried.status == "SUCCEEDED"


def test_it_does_not_reuse_a_result_recorded_for_other_arguments(actors):
    original = declined_trip()
    plan = plan_replay(original, "start")
    assert [op["tool"] for op in plan.operations_reused] == ["booking.notify"]
    # The holds were released by the original's compensation: they are made again.
    assert [op["tool"] for op in plan.operations_may_repeat] == ["booking.hold", "booking.hold"]
    replay = finish(replay_run(original, actor="cli", reason="try again", checkpoint="start"))
    assert calls(devices.booking, "booking.hold", replay) == 2
    # New holds, new hold ids: the guest's text differs, so it is sent, not reused.
    assert calls(devices.booking, "booking.notify", replay) == 1
    [declined] = Event.objects.filter(run=replay, type="operation.reuse_declined")
    assert declined.payload["recorded"] != declined.payload["now"]


def test_it_re_executes_recorded_side_effects_only_with_a_reason(actors):
    original = declined_trip()
    with pytest.raises(ControlError) as exc:
        replay_run(original, actor="cli", reason="", checkpoint="after:hold_car", reexecute=True)
    assert exc.value.code == "reason_required"
    plan = plan_replay(original, "after:hold_car", reexecute=True)
    assert plan.operations_reused == []
    assert [op["tool"] for op in plan.operations_may_repeat] == ["booking.notify"]
    replay = finish(
        replay_run(
            original,
            actor="cli",
            reason="guest lost the text",
            checkpoint="after:hold_car",
            reexecute=True,
        )
    )
    assert calls(devices.booking, "booking.notify", replay) == 1
    [created] = Event.objects.filter(run=replay, type="run.replay_created")
    assert created.payload["reexecute"] is True
    assert created.payload["reason"] == "guest lost the text"


def test_the_dry_run_changes_no_row(actors):
    original = failed_while_lamp_down()
    tables = [Run, Step, Event, Operation, Checkpoint, Message]
    counts = {m.__name__: m.objects.count() for m in tables}
    before = rows(original)
    plan_replay(original)
    result = bulk_replay(bulk_candidates(), actor="cli", reason="x", dry_run=True)
    assert [p.original.pk for p in result.plans] == [original.pk] and not result.created
    assert {m.__name__: m.objects.count() for m in tables} == counts
    assert rows(original) == before


def test_a_succeeded_run_forks_from_start_asking_the_model_again(actors):
    original = finish(
        lifecycle.start_run(
            "room_temperature", thread_id="T1", input={"question": "How warm is it?"}
        )
    )
    assert original.status == "SUCCEEDED"
    assert Operation.objects.filter(run=original, side_effect="model").exists()
    plan = plan_replay(original)
    assert plan.checkpoint.name == "start"
    # Model requests and reads are not side effects to reuse: they are asked again.
    assert plan.operations_reused == [] and plan.operations_may_repeat == []
    fork = finish(replay_run(original, actor="cli", reason="a fork"))
    assert fork.status == "SUCCEEDED"
    assert (
        Operation.objects.filter(run=fork, side_effect="model").count()
        == Operation.objects.filter(run=original, side_effect="model").count()
    )
    assert not Operation.objects.filter(run=fork, reused_from__isnull=False).exists()


@pytest.fixture
def looping_workflow():
    """``think`` runs three times (a ``goto`` loop), then ``answer``."""
    from agentops.authoring import Workflow
    from runs.workflows import registry

    workflow = Workflow("replay_loop", version=1, input_fields={"n": int})

    @workflow.step()
    def think(ctx):
        rounds = ctx.outputs.get("think", {}).get("round", 0) + 1
        ctx.goto("think" if rounds < 3 else "answer")
        return {"round": rounds}

    @workflow.step()
    def answer(ctx):
        return {"rounds": ctx.outputs["think"]["round"]}

    register(workflow)
    yield workflow
    registry.unregister("replay_loop", 1)


def test_it_replays_from_one_iteration_of_a_loop_by_its_label(clients, looping_workflow):
    from django.urls import reverse

    original = finish(lifecycle.start_run("replay_loop", thread_id="L9", input={"n": 1}))
    assert original.status == "SUCCEEDED"
    plan = plan_replay(original, "after:think#2")
    assert plan.checkpoint.step.seq == 2 and plan.checkpoint.state["outputs"]["think"] == {
        "round": 2
    }
    assert [s["seq"] for s in plan.steps_replaced] == [3, 4]
    page = clients["bob"].get(
        reverse("console:replay", args=[original.pk]), {"checkpoint": "after:think#2"}
    )
    assert 'value="after:think#2"' in page.content.decode()
    fork = finish(
        replay_run(original, actor="cli", reason="from round 2", checkpoint="after:think#2")
    )
    assert fork.status == "SUCCEEDED"
    assert [s.name for s in Step.objects.filter(run=fork).order_by("seq")] == ["think", "answer"]
    with pytest.raises(ControlError) as exc:
        plan_replay(original, "after:answer")
    assert exc.value.code == "nothing_to_replay"


def test_a_fork_after_the_draft_reuses_the_publication(actors):
    from approvals.services import decide
    from runs.models import Approval

    original = lifecycle.start_run("weekly_report", thread_id="W1", input={"week": "2026-W48"})
    run_worker_in_process()
    decide(Approval.objects.get(run=original), decision="approve", user=actors["carol"])
    original = finish(original)
    assert original.status == "SUCCEEDED"
    plan = plan_replay(original, "after:draft_report")
    assert [op["tool"] for op in plan.operations_reused] == ["publisher.publish"]
    fork = replay_run(original, actor="cli", reason="ask again", checkpoint="after:draft_report")
    run_worker_in_process()
    decide(Approval.objects.get(run=fork), decision="approve", user=actors["carol"])
    fork = finish(fork)
    assert fork.status == "SUCCEEDED"
    assert calls(devices.publisher, "publisher.publish", fork) == 0
    assert calls(devices.publisher, "publisher.publish", original) == 1


def test_the_replay_stores_a_large_checkpoint_value_once_by_reference(actors):
    from django.db import connection

    from agentops.authoring import StepError, Workflow
    from runs.workflows import registry

    workflow = Workflow("replay_big", version=1, input_fields={"n": int})

    @workflow.step()
    def write(ctx):
        return {"text": "word " * 2000}

    @workflow.step()
    def check(ctx):
        raise StepError("INVALID_ARGUMENT", "not yet")

    register(workflow)
    try:
        original = finish(lifecycle.start_run("replay_big", thread_id="BIG", input={"n": 1}))
        assert original.status == "FAILED"
        fork = replay_run(original, actor="cli", reason="fixed")
        assert fork.replay_checkpoint == "after:write"
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT state FROM runs_checkpoint WHERE run_id = %s",
                [fork.pk.hex if connection.vendor == "sqlite" else fork.pk],
            )
            [(raw,)] = cursor.fetchall()
        assert "$payload" in str(raw) and "word word" not in str(raw)
        cp = Checkpoint.objects.get(run=fork)
        assert cp.state["outputs"]["write"]["text"] == "word " * 2000
    finally:
        registry.unregister("replay_big", 1)
