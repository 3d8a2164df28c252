"""Seeded demo runs are runs the real workflows can continue, compensate and cancel:
a worker, the operator's resolutions and cancels take every one of them to an outcome
without an error, and the runs a worker continues by itself leave the tutorials' lamp
alone."""

from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Q

from approvals.services import decide, resolve_takeover
from lab import demo_seed
from lab.drills.soak import stranded_runs
from lab.sim import devices
from runs.console.roles import setup_roles
from runs.engine.control.cancel import request_cancel
from runs.engine.control.lifecycle import ControlError
from runs.engine.control.waits import deliver_signal, waiting_step
from runs.engine.effects.budget import raise_budget
from runs.engine.effects.unknown_outcomes import resolve_unknown
from runs.engine.execution.sweeper import sweep_once
from runs.engine.state.clock import db_now
from runs.models import Approval, Event, Message, Run, Step, Takeover
from runs.states import RUN_TERMINAL, RunStatus, StepStatus
from tests.support.deployment_runs import shell_json, start_with_command
from tests.support.in_process import device_dir, fast_passwords, run_worker_in_process
from tests.support.waiting import wait_until

__all__ = ["device_dir", "fast_passwords"]

pytestmark = pytest.mark.django_db(transaction=True)

#: Error codes that mean the step's code broke on the seeded data (a KeyError is INTERNAL).
BROKEN = Q(payload__error_code="INTERNAL") | Q(payload__error_code="ARTIFACT_NOT_FOUND")


def _seed(runs: int = 2 * len(demo_seed.SCENARIOS)) -> demo_seed.SeedReport:
    report = demo_seed.Seeder(runs, seed=11).seed()
    # Every lease ends now: a worker continues everything it may.
    Step.objects.filter(status=StepStatus.RUNNING).update(lease_until=db_now())
    return report


def _drain() -> None:
    for _ in range(3):
        sweep_once("test-sweeper", force=True)
        run_worker_in_process()


def _broken_steps() -> list:
    return list(
        Event.objects.filter(type__in=["step.failed", "step.retry_scheduled"])
        .filter(BROKEN)
        .values_list("payload", flat=True)
    )


def test_a_worker_continues_every_seeded_run_without_an_error_or_the_lamp():
    _seed()
    _drain()
    assert _broken_steps() == []
    assert not Event.objects.filter(type="compensation.step", payload__status="FAILED").exists()
    assert devices.lamp.snapshot()["calls"] == []
    assert Run.objects.filter(status=RunStatus.SUCCEEDED, steps__name="reply").exists()


def test_every_seeded_run_can_be_cancelled_and_compensated():
    _seed()
    for run in Run.objects.exclude(status__in=RUN_TERMINAL):
        request_cancel(run, actor="user:operator", reason="demo clean-up")
    _drain()
    left = list(Run.objects.exclude(status__in=RUN_TERMINAL).values_list("status", flat=True))
    assert left == []
    assert _broken_steps() == []
    assert not Event.objects.filter(type="compensation.step", payload__status="FAILED").exists()


def test_the_operators_resolutions_take_seeded_runs_to_the_end():
    _seed()
    for takeover in Takeover.objects.filter(status=Takeover.Status.OPEN).select_related("run"):
        run = takeover.run
        if takeover.cause == "unknown_outcome":
            resolve_unknown(
                run, "set_brightness", outcome="done", evidence="panel shows 70%", actor="cli"
            )
        elif takeover.cause == "budget_exhausted":
            raise_budget(run, actor="cli", add_tool_calls=100, add_model_calls=100,
                         add_cost_usd=Decimal("1"), reason="demo")  # fmt: skip
        elif takeover.cause == "retries_exhausted":
            resolve_takeover(takeover, action="retry", actor="cli", reason="dependency back")
    _drain()
    assert _broken_steps() == []
    for run in Run.objects.filter(takeovers__cause__in=["unknown_outcome", "retries_exhausted"]):
        assert run.status == RunStatus.SUCCEEDED, (run.workflow, run.status)


def test_seeded_conversations_are_in_a_valid_order():
    _seed()
    for run in Run.objects.all():
        messages = list(Message.objects.filter(run=run).order_by("seq"))
        assert messages[0].role == "user"
        called = {}
        for m in messages:
            for call in m.tool_calls or []:
                called[call["id"]] = call["name"]
            if m.role == "tool":
                assert m.tool_call_id in called, "a tool result before its call"
                if called[m.tool_call_id] == "lamp.get_brightness":
                    assert "brightness" in m.content and "celsius" not in m.content
                if called[m.tool_call_id] == "thermostat.read":
                    assert "celsius" in m.content


@pytest.mark.django_db(transaction=False)
def test_the_lamp_tutorial_still_comes_out_as_documented_after_seeding(deployment_factory):
    import json

    d = deployment_factory("sqlite", extra_env={"AGENTOPS_LEASE_SECONDS": 2})
    d.manage("seed_demo", "--runs", "300", check=True, timeout=300)
    burst = d.manage("worker", "--burst", check=True, timeout=600)
    assert "Traceback" not in burst.stderr and "Error" not in burst.stderr, burst.stderr[-3000:]
    run_id = start_with_command(
        d,
        "dim_lights",
        "L",
        json.dumps({"request": "lower the brightness by 10%"}),
        "--crash-after-tool",
        "set_brightness",
    )
    assert d.manage("worker", "--burst", timeout=300).returncode == 75
    lease_expired = (
        "from runs.engine.state.clock import db_now\nfrom runs.models import Step\n"
        f"held = Step.objects.filter(run_id={run_id!r}, lease_until__gte=db_now())\n"
        "print(json.dumps(not held.exists()))"
    )
    wait_until(lambda: shell_json(d, lease_expired), what="the dead worker's 2 s lease to expire")
    d.manage("worker", "--burst", check=True, timeout=300)
    status = d.manage_json("runs", "status", run_id, "--json")
    assert status["status"] == "SUCCEEDED"
    assert status["devices"] == {"lamp.brightness": 70}
    assert status["calls"] == {"lamp.get_brightness": 2, "lamp.set_brightness": 1}


def test_every_open_seeded_run_goes_on_by_a_worker_or_the_action_offered_for_it():
    _seed()
    approver = get_user_model().objects.create_user("seed-approver")
    approver.groups.add(setup_roles()["approver"])
    all_runs = list(Run.objects.values_list("pk", flat=True))
    budget_runs = list(
        Run.objects.filter(takeovers__cause="budget_exhausted").values_list("pk", flat=True)
    )
    assert budget_runs
    for takeover in Takeover.objects.filter(status=Takeover.Status.OPEN).select_related("run"):
        run = takeover.run
        if takeover.cause == "unknown_outcome":
            resolve_unknown(
                run, "set_brightness", outcome="done", evidence="panel shows 70%", actor="cli"
            )
        elif takeover.cause == "budget_exhausted":
            raise_budget(run, actor="cli", add_tool_calls=5, add_model_calls=5, reason="demo")
        elif takeover.cause == "retries_exhausted":
            resolve_takeover(takeover, action="retry", actor="cli", reason="dependency back")
        else:
            with pytest.raises(ControlError) as refused:
                resolve_takeover(takeover, action="resume", actor="cli", reason="go on")
            assert refused.value.code == "unknown_workflow_version"
        assert stranded_runs(all_runs) == [], (takeover.cause, run.workflow)
    for approval in Approval.objects.filter(status=Approval.Status.PENDING):
        assert decide(approval, decision="approve", user=approver).status == "APPROVED"
        assert stranded_runs(all_runs) == []
    waiting = list(Run.objects.filter(status=RunStatus.WAITING_EXTERNAL))
    assert waiting
    for run in waiting:
        delivery = deliver_signal(
            run.pk, demo_seed.DEMO_SIGNAL, demo_seed.DEMO_SIGNAL_PAYLOAD, actor="cli"
        )
        assert delivery.consumed and not delivery.duplicate
        assert stranded_runs(all_runs) == []
    _drain()
    assert stranded_runs(all_runs) == []
    assert _broken_steps() == []
    # Raised, they went on: to their end, or to the next person (a report's approval).
    assert set(Run.objects.filter(pk__in=budget_runs).values_list("status", flat=True)) <= {
        RunStatus.SUCCEEDED,
        RunStatus.WAITING_APPROVAL,
    }
    left = set(Run.objects.exclude(status__in=RUN_TERMINAL).values_list("status", flat=True))
    # Paid, every waiting order went on to its reply.
    assert {r.status for r in Run.objects.filter(pk__in=[r.pk for r in waiting])} == {
        RunStatus.SUCCEEDED
    }
    # Only what needs a person: a version this code lacks, a new approval.
    assert left <= {RunStatus.PAUSED, RunStatus.WAITING_APPROVAL}, left


def test_seeded_waiting_external_runs_wait_for_a_real_signal_until_a_deadline_ahead():
    _seed()
    waiting = list(Run.objects.filter(status=RunStatus.WAITING_EXTERNAL))
    assert waiting
    now = db_now()
    for run in waiting:
        step = waiting_step(run.pk, 1, demo_seed.DEMO_SIGNAL)
        assert step is not None and step.name == "await_payment"
        assert step.lease_until is None and step.owner == ""
        # Not yet past its deadline, so the sweeper leaves it waiting.
        assert step.wait_until is not None and step.wait_until > now
        assert run.current_step_id == step.pk
    sweep_once("test-sweeper", force=True)
    assert set(
        Run.objects.filter(pk__in=[r.pk for r in waiting]).values_list("status", flat=True)
    ) == {RunStatus.WAITING_EXTERNAL}


def test_seeded_unknown_version_runs_are_paused_as_a_worker_pauses_them():
    _seed()
    takeovers = list(
        Takeover.objects.filter(cause="unknown_workflow_version").select_related("run")
    )
    assert takeovers
    for takeover in takeovers:
        run = takeover.run
        assert run.status == RunStatus.PAUSED and run.started_at is None
        assert takeover.reason == f"this code has no workflow {run.workflow}@99"
        assert takeover.evidence["version"] == 99 and takeover.evidence["step"]
        assert "resume" in takeover.suggested_action
        types = list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
        assert types == ["run.created", "step.scheduled", "run.paused", "takeover.opened"]
        assert run.event_seq == len(types)
    _drain()
    # A worker leaves them as they are: one takeover each, still waiting for a deploy.
    for takeover in takeovers:
        assert Takeover.objects.filter(run=takeover.run).count() == 1
        assert Run.objects.get(pk=takeover.run.pk).status == RunStatus.PAUSED
