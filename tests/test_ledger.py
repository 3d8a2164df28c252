"""The operation ledger in process: keys, timeouts of unsafe and read calls, and the
human decision on an unknown outcome (the outside world is an in-memory fake tool)."""

import sqlite3
import threading
import time

import psycopg
import pytest
from django.db import OperationalError, connection

from agentops.authoring import RetryPolicy, Tool, VerifyAnswer, Workflow, register
from runs.engine.control.lifecycle import ControlError, start_run
from runs.engine.effects import ledger
from runs.engine.effects.unknown_outcomes import resolve_unknown, verify_now
from runs.engine.execution import executor
from runs.engine.execution.slots import Slots
from runs.models import Event, Operation, Run, Step, Takeover
from runs.states import RunStatus, StepStatus
from runs.workflows import registry
from tests.support.waiting import wait_until


@pytest.fixture
def outside():
    """A fake outside system: a switch whose ``set`` can be made slow."""
    state = {"calls": [], "value": 0, "delay": 0.0, "release": threading.Event()}

    def set_value(args, call):
        state["calls"].append(call.idempotency_key)
        if state["delay"]:
            state["release"].wait(state["delay"])
        state["value"] = args["value"]
        return {"value": args["value"]}

    def read_value(args, call):
        state["calls"].append("read")
        if state["delay"]:
            time.sleep(state["delay"])  # the fake outside system's slow answer
        return {"value": state["value"]}

    state["set"] = Tool(
        "drill.set",
        fn=set_value,
        side_effect="unsafe",
        timeout=0.2,
        verify=lambda args, call: VerifyAnswer("cannot_tell", evidence="no reads"),
    )
    state["read"] = Tool("drill.read", fn=read_value, side_effect="read", timeout=0.1)
    return state


@pytest.fixture
def drill(outside):
    workflow = Workflow("ledger_drill", version=1)

    @workflow.step(
        retry=RetryPolicy(max_attempts=3, initial_delay=5, max_delay=5), on_exhausted="takeover"
    )
    def act(ctx):
        return ctx.call_tool(outside["set"], {"value": 7})

    @workflow.step(retry=RetryPolicy(max_attempts=2, initial_delay=5, max_delay=5))
    def look(ctx):
        return ctx.call_tool(outside["read"], {})

    register(workflow)
    yield workflow
    outside["release"].set()
    registry.unregister("ledger_drill", 1)


def test_it_keys_one_business_action_per_run_and_generation():
    key = ledger.idempotency_key("r1", 1, "set_brightness", "lamp.set_brightness")
    assert key == ledger.idempotency_key("r1", 1, "set_brightness", "lamp.set_brightness")
    assert key != ledger.idempotency_key("r2", 1, "set_brightness", "lamp.set_brightness")
    assert key != ledger.idempotency_key("r1", 2, "set_brightness", "lamp.set_brightness")


@pytest.mark.django_db(transaction=True)
def test_it_pauses_an_unsafe_call_that_timed_out_and_keeps_its_late_result(drill, outside, worker):
    outside["delay"] = 10
    run = start_run("ledger_drill", thread_id="t", input={})
    step = Step.objects.get(run=run, name="act")
    executor.execute_step(step.pk, worker)

    step.refresh_from_db()
    run.refresh_from_db()
    op = Operation.objects.get(run=run)
    assert (step.status, run.status, op.status) == (
        StepStatus.UNKNOWN,
        RunStatus.PAUSED,
        Operation.Status.UNKNOWN,
    )
    takeover = Takeover.objects.get(run=run, status=Takeover.Status.OPEN)
    assert takeover.cause == "unknown_outcome"
    assert takeover.evidence["operation"]["idempotency_key"] == op.idempotency_key
    assert verify_now(step, actor="user:alice").status == "cannot_tell"

    outside["release"].set()  # the abandoned call finishes after all
    wait_until(
        lambda: Operation.objects.get(pk=op.pk).status == "SUCCEEDED",
        what="the abandoned call's late result",
        timeout=30,
        interval=0.05,
    )
    assert Operation.objects.get(pk=op.pk).result == {"value": 7}
    with pytest.raises(ControlError) as refused:
        resolve_unknown(run, "act", outcome="not-done", evidence="looked", actor="cli")
    assert refused.value.code == "outcome_known"

    resolve_unknown(run, "act", outcome="done", evidence="late result arrived", actor="cli")
    executor.execute_step(step.pk, worker)
    step.refresh_from_db()
    assert (step.status, step.output) == (StepStatus.SUCCEEDED, {"value": 7})
    assert len(outside["calls"]) == 1  # the step reused the result, no second call
    assert Event.objects.filter(run=run, type="unknown.resolved", actor="cli").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_call_timeout_holds_inside_an_execution_slot(drill, outside, worker):
    run = start_run("ledger_drill", thread_id="t", input={})
    executor.execute_step(Step.objects.get(run=run, name="act").pk, worker)
    look = Step.objects.get(run=run, name="look")
    outside["delay"] = 0.5
    slots = Slots(4, lambda step_id, claimed: executor.run_chain(step_id, worker, claimed))
    slots.submit(look.pk)
    assert slots.drain(timeout=30)
    slots.shutdown()

    look.refresh_from_db()
    assert (look.status, look.error_code) == (StepStatus.PENDING, "TIMEOUT")
    retry = Event.objects.get(run=run, type="step.retry_scheduled")
    assert retry.payload["error_code"] == "TIMEOUT"


@pytest.mark.django_db(transaction=True)
def test_it_retries_a_read_call_that_timed_out(drill, outside, worker):
    outside["delay"] = 0.5
    run = start_run("ledger_drill", thread_id="t", input={})
    act = Step.objects.get(run=run, name="act")
    outside["delay"] = 0
    executor.execute_step(act.pk, worker)
    look = Step.objects.get(run=run, name="look")
    outside["delay"] = 0.5
    executor.execute_step(look.pk, worker)

    look.refresh_from_db()
    assert (look.status, look.error_code) == (StepStatus.PENDING, "TIMEOUT")
    retry = Event.objects.get(run=run, type="step.retry_scheduled")
    assert retry.payload["error_code"] == "TIMEOUT"
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING


@pytest.mark.django_db(transaction=True)
def test_a_fenced_intent_checks_the_lease_and_finds_the_row_in_one_statement():
    from django.db import transaction
    from django.test.utils import CaptureQueriesContext

    from runs.engine.effects.model_calls import LedgerTarget
    from runs.engine.errors import LeaseLost
    from runs.engine.state.gateway import transition_operation
    from runs.engine.state.leases import claim_step

    run = start_run("bench_noop", thread_id="ledger-fence", input={})
    step = Step.objects.filter(run=run).order_by("seq").first()
    with transaction.atomic():
        attempt = claim_step(step.pk, "w-ledger", 30)
    target = LedgerTarget("lookup", side_effect="read")

    def intent(key: str, at: int) -> Operation:
        return ledger.record_intent(
            run_id=run.pk, step_id=step.pk, attempt=at, key=key, tool=target, arguments={"q": 1}
        )

    with CaptureQueriesContext(connection) as queries:
        op = intent("fence-key", attempt)
    reads = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    assert len(reads) == 1 and "runs_operation" in reads[0] and "runs_step" in reads[0]
    assert (op.status, op.attempt) == (Operation.Status.INTENT, attempt)
    # A row already there is found by the same statement and read back: the same row.
    assert intent("fence-key", attempt).pk == op.pk
    transition_operation(op, Operation.Status.SUCCEEDED)
    assert intent("fence-key", attempt).status == Operation.Status.SUCCEEDED
    # A stale attempt writes nothing, for a new key or a recorded one.
    for key in ("other-key", "fence-key"):
        with pytest.raises(LeaseLost):
            intent(key, attempt - 1 if attempt > 1 else attempt + 1)
    assert list(Operation.objects.values_list("idempotency_key", "status")) == [
        ("fence-key", Operation.Status.SUCCEEDED)
    ]


def _fault(kind: str) -> Exception:
    """A database error as Django raises it: ``busy`` is SQLite's lock wait running out,
    ``lost`` a connection the server dropped (psycopg's error without a SQLSTATE)."""
    if kind == "busy":
        cause: Exception = sqlite3.OperationalError("database is locked")
    else:
        cause = psycopg.OperationalError("server closed the connection unexpectedly")
    error = OperationalError(str(cause))
    error.__cause__ = cause
    return error


def _failing(faults: list[str], table: str, marker: str):
    """An execute wrapper: each statement on ``table`` carrying ``marker`` in its
    parameters meets the next of ``faults`` (popped) instead of the database."""

    def wrapper(execute, sql, params, many, context):
        target = sql.removeprefix("UPDATE ").removeprefix("INSERT INTO ").split(" ", 1)[0]
        if faults and target == f'"{table}"' and marker in (params or ()):
            raise _fault(faults.pop(0))
        return execute(sql, params, many, context)

    return wrapper


@pytest.mark.django_db(transaction=True)
def test_a_result_write_waits_out_a_busy_or_lost_database(worker):
    """Each result write after a model request or a tool call meets a busy or a lost
    database: the write is tried again, so every step commits on its first attempt,
    each call was made once and its usage counted once."""
    run = start_run("room_temperature", thread_id="t", input={"question": "How warm?"})
    faults = ["busy", "lost", "busy", "lost"]
    with connection.execute_wrapper(_failing(faults, "runs_operation", "SUCCEEDED")):
        executor.run_chain(Step.objects.get(run=run).pk, worker)
    run.refresh_from_db()
    assert faults == []
    assert run.status == RunStatus.SUCCEEDED
    steps = list(Step.objects.filter(run=run).order_by("seq").values_list("name", "attempt"))
    assert steps == [("plan", 1), ("read_temperature", 1), ("reply", 1)]
    ops = list(Operation.objects.filter(run=run).values_list("tool", "status", "attempt"))
    assert sorted(ops) == [
        ("sim", "SUCCEEDED", 1),
        ("sim", "SUCCEEDED", 1),
        ("thermostat.read", "SUCCEEDED", 1),
    ]
    replies = Operation.objects.filter(run=run, tool="sim")
    tokens = sum(
        op.result["usage"]["input_tokens"] + op.result["usage"]["output_tokens"] for op in replies
    )
    assert (run.model_calls, run.tool_calls, run.tokens) == (2, 1, tokens)
    types = set(Event.objects.filter(run=run).values_list("type", flat=True))
    assert not types & {"step.failed", "step.released", "step.retry_scheduled"}


@pytest.mark.django_db(transaction=True)
def test_a_late_result_and_a_verify_answer_wait_out_a_lost_database(drill, outside, worker):
    outside["delay"] = 10
    run = start_run("ledger_drill", thread_id="t", input={})
    executor.execute_step(Step.objects.get(run=run, name="act").pk, worker)
    op = Operation.objects.get(run=run)
    verified = Event.objects.filter(run=run, type="operation.verified")
    before = verified.count()
    faults = ["lost", "busy"]
    with connection.execute_wrapper(_failing(faults, "runs_event", "operation.verified")):
        ledger.record_verified(op, VerifyAnswer("cannot_tell"), step_id=op.step_id, actor="t")
    faults += ["busy", "lost"]
    with connection.execute_wrapper(_failing(faults, "runs_operation", "SUCCEEDED")):
        ledger.record_late_result(op.pk, {"value": 7})
    assert faults == []
    assert verified.count() == before + 1
    op.refresh_from_db()
    assert (op.status, op.result) == (Operation.Status.SUCCEEDED, {"value": 7})
