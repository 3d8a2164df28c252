"""A step's timeout holds on every path it can wait on: a streamed model reply (from
an OpenAI-compatible server or the simulated model), an agent's model request, a tool's
verify hook, artifact storage; and a graceful stop (SIGTERM) never waits on an outside
call past it. Real database and worker processes; the model server on loopback is the
outside world."""

import asyncio
import os
import signal
import threading

import pytest
from django.core.files.storage import FileSystemStorage

import tests.workflows.faulty as faulty
import tests.workflows.streaming  # noqa: F401 - registers streamed_reply
from agentops.authoring import RetryPolicy, StepError, Tool, Workflow, register
from runs.engine.control.lifecycle import start_run
from runs.engine.effects import calls
from runs.engine.effects.compensation import compensate_run
from runs.engine.effects.unknown_outcomes import verify_now
from runs.engine.execution import executor
from runs.models import Artifact, Event, Operation, Step
from runs.states import StepStatus
from runs.workflows import registry
from tests.support.deployment_runs import db_rows, start_with_command
from tests.support.openai_server import ModelServer
from tests.support.waiting import wait_until

STALLED_REPLY = "It is twenty one degrees in the living room"


def _types(run) -> list[str]:
    return list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def _timed_out_once(run) -> Step:
    """The run's one step after its first attempt ended at the timeout: PENDING for a
    retry, ``TIMEOUT``, the request FAILED in the ledger, its draft abandoned."""
    step = Step.objects.get(run=run)
    assert (step.status, step.attempt, step.error_code) == (StepStatus.PENDING, 1, "TIMEOUT")
    [op] = Operation.objects.filter(run=run, side_effect="model")
    assert op.status == "FAILED" and op.result["error_code"] == "TIMEOUT"
    types = _types(run)
    assert "step.retry_scheduled" in types and "message.superseded" in types
    return step


def _import_the_model_client() -> None:
    """Import the HTTP model client before the clock runs: a process's first request
    imports it (seconds on a busy machine), inside the step's timeout."""
    import pydantic_ai.direct  # noqa: F401
    import pydantic_ai.models.openai  # noqa: F401


def _no_outside_call_running() -> bool:
    return not any(t.name == calls.THREAD_NAME for t in threading.enumerate())


@pytest.mark.django_db(transaction=True)
def test_a_streamed_reply_that_stalls_ends_the_attempt_and_the_client_closes_it(worker, settings):
    """The attempt ends at the step's timeout while the server still holds the rest of
    the reply; the step's timeout goes to the HTTP client as the request's, so the
    stream the step gave up on does not run on for the SDK's own 600 s."""
    _import_the_model_client()
    hold = threading.Event()
    answer = {"content": STALLED_REPLY, "hold": hold, "hold_after": 2}
    with ModelServer(lambda body: answer) as server:
        settings.OPENAI_BASE_URL = server.base_url
        settings.OPENAI_API_KEY = "unused"
        run = start_run(
            "streamed_reply",
            thread_id="t-stall",
            input={"question": "How warm is it?", "model": "openai:test-model"},
        )
        try:
            executor.execute_step(Step.objects.get(run=run).pk, worker)
            # The attempt ended while the server still held the rest of the reply.
            assert not hold.is_set()
            wait_until(_no_outside_call_running, timeout=60, what="the abandoned stream ended")
            assert not hold.is_set()
        finally:
            hold.set()
    _timed_out_once(run)
    assert server.count == 1


asks_once = Workflow(
    "asks_once", version=1, input_fields={"question": str}, message_field="question"
)


@asks_once.step(timeout=2, retry=RetryPolicy(max_attempts=2, initial_delay=30, max_delay=30))
def ask(ctx):
    return {"answer": ctx.call_model(ctx.messages(), model=ctx.input.get("model")).content}


register(asks_once)


@pytest.mark.django_db(transaction=True)
def test_an_abandoned_model_request_is_closed_by_the_model_client(worker, settings):
    _import_the_model_client()
    hold = threading.Event()
    with ModelServer(lambda body: {"content": "late", "hold": hold}) as server:
        settings.OPENAI_BASE_URL = server.base_url
        settings.OPENAI_API_KEY = "unused"
        run = start_run(
            "asks_once",
            thread_id="t-request-closed",
            input={"question": "How warm is it?", "model": "openai:test-model"},
        )
        try:
            executor.execute_step(Step.objects.get(run=run).pk, worker)
            step = Step.objects.get(run=run)
            assert (step.status, step.error_code) == (StepStatus.PENDING, "TIMEOUT")
            wait_until(_no_outside_call_running, timeout=60, what="the abandoned request ended")
            assert not hold.is_set()
        finally:
            hold.set()
    [op] = Operation.objects.filter(run=run, side_effect="model")
    assert op.status == "FAILED" and op.result["error_code"] == "TIMEOUT"


@pytest.mark.django_db(transaction=True)
def test_a_simulated_reply_slower_than_the_steps_timeout_ends_the_attempt(worker, settings):
    settings.AGENTOPS_SIM_WORD_SECONDS = 3  # past the step's 2 s after the first word
    run = start_run("streamed_reply", thread_id="t-sim-slow", input={"question": "How warm is it?"})
    executor.execute_step(Step.objects.get(run=run).pk, worker)
    _timed_out_once(run)


def test_a_graceful_stop_does_not_wait_on_a_stalled_stream(deployment_factory):
    hold = threading.Event()
    answer = {"content": STALLED_REPLY, "hold": hold, "hold_after": 1}
    with ModelServer(lambda body: answer) as server:
        d = deployment_factory(
            "sqlite",
            {
                "AGENTOPS_EXTRA_WORKFLOW_MODULES": "tests.workflows.streaming",
                "AGENTOPS_MODEL": "openai:test-model",
                "OPENAI_BASE_URL": server.base_url,
                "OPENAI_API_KEY": "unused",
            },
        )
        run_id = start_with_command(d, "streamed_reply", "T", '{"question": "How warm is it?"}')
        worker = d.popen("worker", "--mode", "db")
        try:
            wait_until(lambda: server.count == 1, timeout=120, what="the model request")
            os.kill(worker.pid, signal.SIGTERM)
            # Bounded by the step's 2 s timeout, not by the stalled stream.
            code = worker.wait(timeout=60)
            assert not hold.is_set()
        finally:
            hold.set()
    assert code == 0, d.logs(worker)
    assert run_id
    rows = db_rows(d, "SELECT status, error_code FROM runs_step")
    assert [tuple(r) for r in rows] == [("PENDING", "TIMEOUT")]


@pytest.fixture
def slow_model_agent():
    """An agent with a 1 s timeout whose model would take 30 s to answer; yields an
    event set when that request is cancelled."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from agentops.authoring import register_agent

    cancelled = threading.Event()

    async def slow(messages, info):
        try:
            await asyncio.sleep(30)  # the fake model hangs past the call's timeout
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ModelResponse(parts=[TextPart("late")])

    register_agent(
        Agent(name="slow_model"),
        name="slow_model_agent",
        timeout=1,
        offline_model=FunctionModel(slow),
    )
    yield cancelled
    registry.unregister("slow_model_agent", 1)


@pytest.mark.django_db(transaction=True)
def test_an_agents_model_request_is_held_to_the_agents_timeout(worker, slow_model_agent):
    run = start_run("slow_model_agent", thread_id="t-slow-agent", input={"prompt": "hi"})
    step = Step.objects.get(run=run, name="agent")
    executor.execute_step(step.pk, worker)
    step.refresh_from_db()
    assert (step.status, step.error_code) == (StepStatus.PENDING, "TIMEOUT")
    assert "exceeded its timeout of 1s" in step.error_detail
    [op] = Operation.objects.filter(run=run, side_effect="model")
    assert op.status == "FAILED"
    # The abandoned request was cancelled on the agent's loop, not left pending there.
    assert slow_model_agent.wait(10)


@pytest.mark.django_db(transaction=True)
def test_a_verify_hook_that_hangs_is_cannot_tell_at_the_timeout(worker):
    """An unsafe call an earlier attempt may have made is verified first; a verify
    that does not answer within the tool's timeout cannot tell, and a person decides."""
    run = start_run("faulty", thread_id="t-slow-verify", input={"case": "post_hanging_verify"})
    step = Step.objects.get(run=run, name="produce")
    faulty.VERIFY_RELEASE.clear()
    try:
        executor.execute_step(step.pk, worker)  # the post fails after being sent
        step.refresh_from_db()
        run.refresh_from_db()
        assert run.status == "PAUSED" and step.status == StepStatus.UNKNOWN
        evidence = Event.objects.get(run=run, type="operation.verified").payload["evidence"]
        assert "verify call exceeded its timeout of 1" in evidence
    finally:
        faulty.VERIFY_RELEASE.set()


#: A post on a step with a 1 s timeout, through a tool without a timeout of its own
#: whose verify hangs (until ``faulty.VERIFY_RELEASE``, at most a minute).
post_unbounded = Tool(
    "test.post_unbounded",
    faulty._post,
    side_effect="unsafe",
    verify=faulty._verify_hanging,
)
verifies_slowly = Workflow("verifies_slowly", version=1, input_fields={"text": str})


@verifies_slowly.step(timeout=1)
def post(ctx):
    return ctx.call_tool(post_unbounded, {"text": ctx.input["text"]})


register(verifies_slowly)


@pytest.mark.django_db(transaction=True)
def test_a_verify_after_a_failed_send_is_held_to_the_steps_timeout(worker):
    """A tool without a timeout of its own: the verify asked after its call failed is
    held to the step's timeout, as the call was."""
    faulty.VERIFY_RELEASE.clear()
    try:
        run = start_run("verifies_slowly", thread_id="t-step-verify", input={"text": "hello"})
        step = Step.objects.get(run=run, name="post")
        executor.execute_step(step.pk, worker)
        step.refresh_from_db()
        run.refresh_from_db()
        assert run.status == "PAUSED" and step.status == StepStatus.UNKNOWN
        [verified] = Event.objects.filter(run=run, type="operation.verified")
        assert "verify call exceeded its timeout of 1" in verified.payload["evidence"]
        assert "HTTP 500" in verified.payload["after"]
    finally:
        faulty.VERIFY_RELEASE.set()


@pytest.mark.django_db(transaction=True)
def test_an_operators_verify_is_held_to_the_verify_setting(worker, settings):
    """An operator's check has no step deadline: ``AGENTOPS_VERIFY_SECONDS`` bounds it."""
    faulty.VERIFY_RELEASE.clear()
    try:
        run = start_run("verifies_slowly", thread_id="t-operator-verify", input={"text": "hi"})
        step = Step.objects.get(run=run, name="post")
        executor.execute_step(step.pk, worker)
        step.refresh_from_db()
        assert step.status == StepStatus.UNKNOWN
        settings.AGENTOPS_VERIFY_SECONDS = 1
        answer = verify_now(step, actor="user:bob")
        assert answer.status == "cannot_tell"
        assert "exceeded its timeout of 1" in answer.evidence
        asked = Event.objects.filter(run=run, type="operation.verified").order_by("seq")
        assert [e.payload.get("requested_by") for e in asked] == [None, "user:bob"]
        step.refresh_from_db()
        assert step.status == StepStatus.UNKNOWN
    finally:
        faulty.VERIFY_RELEASE.set()


#: Released by the storage test: until then the storage below does not answer.
STORAGE_RELEASE = threading.Event()


class UnansweringStorage(FileSystemStorage):
    """A file storage (the outside world here) that hangs on every write until
    ``STORAGE_RELEASE`` is set (at most a minute)."""

    def _save(self, name, content):
        STORAGE_RELEASE.wait(60)
        return super()._save(name, content)


slow_storage = Workflow("slow_storage", version=1)


@slow_storage.step(timeout=1)
def write_notes(ctx):
    ctx.save_artifact("notes.md", "# notes\n")
    return {"saved": True}


register(slow_storage)


@pytest.mark.django_db(transaction=True)
def test_an_artifact_write_the_storage_does_not_answer_ends_at_the_timeout(
    worker, settings, tmp_path
):
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": f"{__name__}.UnansweringStorage",
            "OPTIONS": {"location": str(tmp_path)},
        },
    }
    STORAGE_RELEASE.clear()
    run = start_run("slow_storage", thread_id="t-slow-storage", input={})
    step = Step.objects.get(run=run)
    try:
        executor.execute_step(step.pk, worker)
        step.refresh_from_db()
        assert (step.status, step.error_code) == (StepStatus.PENDING, "TIMEOUT")
        assert "writing artifact notes.md" in step.error_detail
        assert not Artifact.objects.filter(run=run).exists()
    finally:
        STORAGE_RELEASE.set()


#: Released by the compensation test: until then the booking system does not answer.
CANCEL_RELEASE = threading.Event()


def _cancel_booking(arguments: dict, call) -> dict:
    CANCEL_RELEASE.wait(60)
    return {"cancelled": True}


cancel_booking = Tool("test.cancel_booking", _cancel_booking, side_effect="idempotent")

undone_slowly = Workflow("undone_slowly", version=1)


@undone_slowly.step(
    timeout=1, compensate=lambda ctx, output: ctx.call_tool(cancel_booking, {"id": "B1"})
)
def book(ctx):
    return {"booking": "B1"}


@undone_slowly.step()
def refuse(ctx):
    raise StepError("INVALID_ARGUMENT", "no such destination")


register(undone_slowly)


@pytest.mark.django_db(transaction=True)
def test_a_compensation_call_is_held_to_the_undone_steps_timeout(worker):
    run = start_run("undone_slowly", thread_id="t-undo-slowly", input={})
    CANCEL_RELEASE.clear()
    try:
        executor.run_chain(Step.objects.get(run=run, name="book").pk, worker)
        run.refresh_from_db()
        assert run.status == "FAILED"
        report = compensate_run(run, actor="test")
        [entry] = [e for e in report.steps if e["step"] == "book"]
        assert entry["status"] == "FAILED" and "exceeded its timeout of 1" in entry["detail"]
    finally:
        CANCEL_RELEASE.set()
