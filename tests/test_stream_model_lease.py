"""``ctx.stream_model`` stops streaming only on a lease known lost or a cancel request,
as an agent's streamed model request does: a heartbeat that is merely late (a worker
busy elsewhere) does not cost the step its reply. In-process, with a provider that
makes the renewal late between two pieces of its stream."""

import time

import pytest

from agentops.authoring import Workflow, register
from runs.engine.control.lifecycle import start_run
from runs.engine.effects import model_providers
from runs.engine.effects.model_providers import ModelReply
from runs.engine.execution import executor
from runs.models import Event, Run, Step
from runs.states import RunStatus
from runs.workflows import registry


class LateHeartbeat:
    """Streams "Hel" then "lo", making the step's lease renewal overdue in between."""

    name = "late"

    def __init__(self, contexts: list):
        self.contexts = contexts

    def complete(self, messages, tools, *, timeout=None) -> ModelReply:
        raise AssertionError("only streamed here")

    def stream(self, messages, *, timeout=None):
        yield "Hel"
        ctx = self.contexts[-1]
        # The last renewal is older than two thirds of a lease: a safe point would
        # call the lease lost, though the heartbeat never found it gone.
        ctx._renew_by = time.monotonic() - ctx._lease_seconds
        yield "lo"
        yield ModelReply(model="late")


@pytest.fixture
def late_stream():
    contexts: list = []
    model_providers.register_provider("late", lambda name, setting: LateHeartbeat(contexts))
    workflow = Workflow("late_stream", version=1)

    @workflow.step()
    def reply(ctx):
        contexts.append(ctx)
        message_id = ctx.begin_message()
        answer = ctx.stream_model([], message_id=message_id, model="late")
        ctx.finish_message(message_id, answer.content)
        return {"answer": answer.content}

    register(workflow)
    yield
    registry.unregister("late_stream", 1)
    model_providers._factories.pop("late", None)
    model_providers._providers.clear()


@pytest.mark.django_db(transaction=True)
def test_a_late_heartbeat_does_not_stop_a_streamed_reply(late_stream, worker):
    run = start_run("late_stream", thread_id="t", input={})
    executor.execute_step(Step.objects.get(run=run, name="reply").pk, worker)

    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    assert Step.objects.get(run=run, name="reply").output == {"answer": "Hello"}
    deltas = Event.objects.filter(run=run, type="message.delta").order_by("id")
    assert [e.payload["text"] for e in deltas] == ["Hel", "lo"]
