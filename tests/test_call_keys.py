"""Every call a step makes has its own ledger row, and a recorded result answers only the
request it recorded: three emails by one tool are three calls at the simulated mailer,
and a step that asks a recorded call differently after a crash pauses the run with a
``non_determinism`` takeover instead of reusing another request's result. One test per
place a recorded result is handed back: tool calls, model requests, an agent's tool
calls, compensations, and rows carried over by a resume or a replay."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agentops.authoring import AgentTool, RetryPolicy, Workflow, register
from lab.sim import devices, services
from lab.workflows.synthetic import mailer_send
from runs.agents.durability import LedgerRun
from runs.engine.control.lifecycle import start_run
from runs.engine.effects import ledger
from runs.engine.effects.compensation import CompensationContext, compensation_key
from runs.engine.errors import LeaseLost, NonDeterminism
from runs.engine.execution import executor
from runs.models import Event, Operation, Run, Step, Takeover
from runs.states import RunStatus, StepStatus
from runs.workflows import registry
from tests.support.states import arrange

RECIPIENTS = ["alice", "bob", "carol"]


@pytest.fixture
def mailer():
    """The simulated mailer, emptied; yields its applied effects as a function."""
    devices.reset_world()
    yield lambda: [a for a in services.mailer.snapshot()["state"]["applied"] if a["op"] == "send"]
    devices.reset_world()


@pytest.fixture
def plan():
    """What the ``email_three`` step is asked to do; a test changes it between attempts."""
    return {"to": list(RECIPIENTS), "crash_after": None, "model_messages": 1}


@pytest.fixture
def email_three(plan):
    workflow = Workflow("email_three", version=1)

    @workflow.step(retry=RetryPolicy(max_attempts=3, initial_delay=5, max_delay=5))
    def send(ctx):
        receipts = []
        for to in plan["to"]:
            receipts.append(ctx.call_tool(mailer_send, {"to": to, "subject": "status"}))
            if plan["crash_after"] == to:
                plan["crash_after"] = None
                # What a worker dying here leaves: the step RUNNING under this attempt.
                raise LeaseLost("worker died after the call")
        return receipts

    register(workflow)
    yield workflow
    registry.unregister("email_three", 1)


def _reclaim_after_crash(step: Step, worker) -> None:
    """The crashed attempt's lease runs out; the next worker reclaims the step."""
    arrange(Step.objects.filter(pk=step.pk), lease_until=timezone.now() - timedelta(seconds=1))
    executor.execute_step(step.pk, worker)


@pytest.mark.django_db(transaction=True)
def test_it_sends_one_email_per_recipient_with_its_own_receipt(email_three, mailer, worker):
    run = start_run("email_three", thread_id="t", input={})
    step = Step.objects.get(run=run, name="send")
    executor.execute_step(step.pk, worker)

    step.refresh_from_db()
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    assert [a["args"]["to"] for a in mailer()] == RECIPIENTS
    assert devices.device_calls(str(run.pk)) == {"mailer.send": 3}
    ops = list(Operation.objects.filter(run=run).order_by("pk"))
    assert [op.arguments["to"] for op in ops] == RECIPIENTS
    assert len({op.idempotency_key for op in ops}) == 3
    assert ops[0].idempotency_key.endswith(":send:mailer.send")  # the key older runs have
    assert [op.idempotency_key[-2:] for op in ops[1:]] == ["#1", "#2"]
    assert len({receipt["ref"] for receipt in step.output}) == 3
    assert [r["key"] for r in step.output] == [op.idempotency_key for op in ops]


@pytest.mark.django_db(transaction=True)
def test_it_reuses_each_recorded_call_after_a_crash(email_three, mailer, plan, worker):
    plan["crash_after"] = "bob"
    run = start_run("email_three", thread_id="t", input={})
    step = Step.objects.get(run=run, name="send")
    executor.execute_step(step.pk, worker)
    assert [a["args"]["to"] for a in mailer()] == ["alice", "bob"]

    _reclaim_after_crash(step, worker)

    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    assert [a["args"]["to"] for a in mailer()] == RECIPIENTS
    assert devices.device_calls(str(run.pk)) == {"mailer.send": 3}


@pytest.mark.django_db(transaction=True)
def test_it_pauses_a_crash_replay_that_asks_a_recorded_call_differently(
    email_three, mailer, plan, worker
):
    plan["crash_after"] = "alice"
    run = start_run("email_three", thread_id="t", input={})
    step = Step.objects.get(run=run, name="send")
    executor.execute_step(step.pk, worker)
    recorded_key = Operation.objects.get(run=run).idempotency_key

    plan["to"] = ["dave", "bob", "carol"]  # the code or its inputs changed meanwhile
    _reclaim_after_crash(step, worker)

    step.refresh_from_db()
    assert Run.objects.get(pk=run.pk).status == RunStatus.PAUSED
    assert (step.status, step.error_code) == (StepStatus.FAILED, "NON_DETERMINISM")
    takeover = Takeover.objects.get(run=run, status=Takeover.Status.OPEN)
    assert takeover.cause == "non_determinism"
    assert takeover.evidence["idempotency_key"] == recorded_key
    assert takeover.evidence["action"] == "mailer.send"
    assert takeover.evidence["recorded"] == {
        "tool": "mailer.send",
        "arguments": {"to": "alice", "subject": "status"},
    }
    assert takeover.evidence["now"] == {
        "tool": "mailer.send",
        "arguments": {"to": "dave", "subject": "status"},
    }
    assert [a["args"]["to"] for a in mailer()] == ["alice"]  # nobody else was mailed
    assert Event.objects.filter(run=run, type="step.retry_scheduled").count() == 0


@pytest.fixture
def model_plan():
    return {"messages": 1, "crash": True}


@pytest.fixture
def ask_twice(model_plan):
    workflow = Workflow("ask_model_twice", version=1)

    @workflow.step(retry=RetryPolicy(max_attempts=3, initial_delay=5, max_delay=5))
    def ask(ctx):
        messages = [
            {"role": "user", "content": f"question {i}", "tool_calls": [], "tool_call_id": None}
            for i in range(model_plan["messages"])
        ]
        first = ctx.call_model(messages)
        if model_plan["crash"]:
            model_plan["crash"] = False
            raise LeaseLost("worker died after the request")
        return {"first": first.content, "second": ctx.call_model(messages).content}

    register(workflow)
    yield workflow
    registry.unregister("ask_model_twice", 1)


@pytest.mark.django_db(transaction=True)
def test_it_pauses_a_model_request_asked_differently_after_a_crash(ask_twice, model_plan, worker):
    run = start_run("ask_model_twice", thread_id="t", input={})
    step = Step.objects.get(run=run, name="ask")
    executor.execute_step(step.pk, worker)

    model_plan["messages"] = 3
    _reclaim_after_crash(step, worker)

    takeover = Takeover.objects.get(run=run, status=Takeover.Status.OPEN)
    assert takeover.cause == "non_determinism"
    assert takeover.evidence["action"] == "model.0"
    assert takeover.evidence["recorded"]["arguments"]["messages"] == 1
    assert takeover.evidence["now"]["arguments"]["messages"] == 3
    assert Operation.objects.filter(run=run, side_effect="model").count() == 1


@pytest.mark.django_db(transaction=True)
def test_it_reuses_a_model_request_asked_the_same_after_a_crash(ask_twice, worker):
    run = start_run("ask_model_twice", thread_id="t", input={})
    step = Step.objects.get(run=run, name="ask")
    executor.execute_step(step.pk, worker)
    _reclaim_after_crash(step, worker)

    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    assert Operation.objects.filter(run=run, side_effect="model").count() == 2


@pytest.fixture
def agent_calls():
    """A step that runs an agent's tool calls through ``LedgerRun`` as an agent workflow
    does, with a provider that repeats one tool-call id for every call."""
    workflow = Workflow("agent_same_call_id", version=1)
    sent: list[str] = []

    @workflow.step()
    def act(ctx):
        ledger_run = LedgerRun(ctx, None, "sim", {"notify": AgentTool(side_effect="unsafe")})

        def run_tool(arguments, info):
            sent.append(arguments["to"])
            return {"sent_to": arguments["to"], "key": info.idempotency_key}

        # The agent bridge gives each call its place among the calls with its id.
        return [
            ledger_run.tool_call("call_0", "notify", {"to": to}, run_tool, position=i)
            for i, to in enumerate(RECIPIENTS)
        ]

    register(workflow)
    yield sent
    registry.unregister("agent_same_call_id", 1)


@pytest.mark.django_db(transaction=True)
def test_it_gives_each_agent_tool_call_its_own_row_when_ids_repeat(agent_calls, worker):
    run = start_run("agent_same_call_id", thread_id="t", input={})
    step = Step.objects.get(run=run, name="act")
    executor.execute_step(step.pk, worker)

    step.refresh_from_db()
    assert agent_calls == RECIPIENTS
    assert [r["sent_to"] for r in step.output] == RECIPIENTS
    assert Operation.objects.filter(run=run, tool="notify").count() == 3


@pytest.mark.django_db(transaction=True)
def test_it_gives_each_compensating_call_its_own_row(email_three, mailer, worker):
    run = start_run("email_three", thread_id="t", input={})
    step = Step.objects.get(run=run, name="send")
    executor.execute_step(step.pk, worker)
    step.refresh_from_db()

    ctx = CompensationContext(Run.objects.get(pk=run.pk), step, "test")
    notices = [ctx.call_tool(mailer_send, {"to": to, "subject": "sorry"}) for to in RECIPIENTS]

    assert len({n["ref"] for n in notices}) == 3
    key = compensation_key(run.pk, step, "mailer.send")
    assert Operation.objects.filter(idempotency_key__startswith=key).count() == 3
    assert [a["args"]["subject"] for a in mailer()].count("sorry") == 3


@pytest.mark.django_db(transaction=True)
def test_it_declines_a_carried_over_result_asked_by_another_tool(email_three, mailer, worker):
    run = start_run("email_three", thread_id="t", input={})
    step = Step.objects.get(run=run, name="send")
    executor.execute_step(step.pk, worker)
    original = Operation.objects.filter(run=run).order_by("pk").first()
    assert original is not None
    (copy,) = ledger.record_reused([original], run_id=run.pk, generation=2)

    assert not ledger.decline_reuse(copy, "mailer.send", original.arguments)
    assert ledger.decline_reuse(copy, "mailer.send_later", original.arguments)
    assert not Operation.objects.filter(pk=copy.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_it_compares_a_recorded_request_as_stored(email_three, worker):
    run = start_run("email_three", thread_id="t", input={})
    step = Step.objects.get(run=run, name="send")
    executor.execute_step(step.pk, worker)
    op = Operation.objects.filter(run=run).order_by("pk").first()
    assert op is not None

    ledger.check_same_request(op, "mailer.send", {"subject": "status", "to": "alice"}, action="a")
    with pytest.raises(NonDeterminism) as raised:
        ledger.check_same_request(op, "mailer.send", {"to": "alice"}, action="a")
    assert raised.value.code == "NON_DETERMINISM"
    assert raised.value.evidence["now"] == {"tool": "mailer.send", "arguments": {"to": "alice"}}
