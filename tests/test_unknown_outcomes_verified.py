"""Every unknown outcome of an unsafe call asks the tool's ``verify`` first, as the crash
path does, against the simulated mailer (it applies every request; its ``verify`` looks
the message up by idempotency key): a timeout whose effect lands late, a timeout whose
effect landed but whose answer is late, and an answer lost after sending. What an
operator may then do follows what the ledger knows."""

import pytest

from agentops.authoring import RetryPolicy, Workflow, register
from lab.sim import devices, services
from lab.sim import faults as sim_faults
from lab.workflows.synthetic import mailer_send
from runs.engine.control.lifecycle import ControlError, start_run
from runs.engine.effects.unknown_outcomes import resolve_unknown, verify_now
from runs.engine.execution import executor
from runs.models import Event, Operation, Run, Step, Takeover
from runs.states import RunStatus, StepStatus
from runs.workflows import registry
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def mail_once():
    devices.reset_world()
    workflow = Workflow("mail_once", version=1)

    @workflow.step(timeout=0.5, retry=RetryPolicy(max_attempts=2, initial_delay=5, max_delay=5))
    def send(ctx):
        return ctx.call_tool(mailer_send, {"to": "alice", "subject": "status"})

    register(workflow)
    yield workflow
    registry.unregister("mail_once", 1)
    sim_faults.clear()
    devices.reset_world()


def sent() -> list[str]:
    return [a["args"]["to"] for a in services.mailer.snapshot()["state"]["applied"]]


def start(worker) -> tuple[Run, Step]:
    run = start_run("mail_once", thread_id="t", input={})
    step = Step.objects.get(run=run, name="send")
    executor.execute_step(step.pk, worker)
    return Run.objects.get(pk=run.pk), Step.objects.get(pk=step.pk)


def verified(run: Run) -> list[tuple[str, str]]:
    return [
        (e.payload["answer"], e.payload.get("after", "").split(":")[1].strip())
        for e in Event.objects.filter(run=run, type="operation.verified").order_by("seq")
    ]


def test_a_timeout_whose_effect_lands_late_is_verified_then_follows_the_ledger(mail_once, worker):
    sim_faults.arm("mailer.send", "delay", when="before", seconds=2)
    run, step = start(worker)

    assert verified(run) == [("not_done", "CallTimedOut")]
    assert (run.status, step.status) == (RunStatus.PAUSED, StepStatus.UNKNOWN)
    assert Takeover.objects.get(run=run, status="OPEN").cause == "unknown_outcome"

    op = Operation.objects.get(run=run)
    wait_until(
        lambda: Operation.objects.get(pk=op.pk).status == Operation.Status.SUCCEEDED,
        timeout=60,
        what="the late result in the ledger",
    )
    assert sent() == ["alice"]
    with pytest.raises(ControlError) as refused:
        resolve_unknown(run, "send", outcome="not-done", evidence="looked", actor="cli")
    assert refused.value.code == "outcome_known"
    answer = verify_now(step, actor="user:bob")
    assert (answer.status, answer.result["key"]) == ("done", op.idempotency_key)

    resolve_unknown(run, "send", outcome="done", evidence="the result arrived", actor="cli")
    executor.execute_step(step.pk, worker)
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    assert sent() == ["alice"]
    assert devices.device_calls(str(run.pk)) == {"mailer.send": 1}


def test_a_timeout_whose_effect_landed_is_verified_done_and_goes_on(mail_once, worker):
    sim_faults.arm("mailer.send", "delay", when="after", seconds=2)
    run, step = start(worker)

    assert verified(run) == [("done", "CallTimedOut")]
    assert (run.status, step.status) == (RunStatus.SUCCEEDED, StepStatus.SUCCEEDED)
    assert step.output["key"] == Operation.objects.get(run=run).idempotency_key
    assert not Takeover.objects.filter(run=run).exists()
    assert sent() == ["alice"]


def test_an_answer_lost_after_sending_is_verified_done_and_goes_on(mail_once, worker):
    sim_faults.arm("mailer.send", "fail", when="after")
    run, step = start(worker)

    assert verified(run) == [("done", "DeviceFault")]
    assert (run.status, step.status) == (RunStatus.SUCCEEDED, StepStatus.SUCCEEDED)
    assert sent() == ["alice"]


def test_a_request_that_failed_before_acting_is_verified_not_done_and_retried(mail_once, worker):
    sim_faults.arm("mailer.send", "fail", when="before")
    run, step = start(worker)

    assert verified(run) == [("not_done", "DeviceFault")]
    assert (run.status, step.status, step.error_code) == (
        RunStatus.RUNNING,
        StepStatus.PENDING,
        "DEPENDENCY_UNAVAILABLE",
    )
    assert Operation.objects.get(run=run).status == Operation.Status.FAILED
    assert sent() == []
