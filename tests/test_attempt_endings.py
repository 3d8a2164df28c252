"""Everything between a step's claim and its commit ends the attempt through the one
failure path (``executor.end_attempt``): a step the deployed definition no longer
declares, an approval request that is not one, a commit the database refuses, a
stdout that went away. Each is recorded as events, counted against the attempt limit,
and never leaves the step RUNNING to be claimed again at every lease expiry. Real
database, in-process executor."""

import io
import sys

import pytest
from django.db import OperationalError
from django.db.models.functions import Now

import tests.workflows.faulty  # noqa: F401 - registers the workflow
from agentops.authoring import Workflow, register
from runs.engine.control.lifecycle import start_run
from runs.engine.execution import executor
from runs.engine.state import checkpoints
from runs.engine.state.store import store
from runs.models import Event, Message, Run, Step, Summary, Takeover
from runs.states import RunStatus, StepStatus
from runs.workflows import registry
from tests.support.states import arrange

pytestmark = pytest.mark.django_db(transaction=True)

asks_oddly = Workflow("asks_oddly", version=1, input_fields={"case": str})


@asks_oddly.approval(on_reject=None)
def confirm(ctx):
    return "please approve"  # not {question, reason, evidence}


@asks_oddly.step()
def done(ctx):
    return {"ok": True}


register(asks_oddly)

exits = Workflow("exits", version=1, input_fields={"case": str})


@exits.step()
def leave(ctx):
    if ctx.input["case"] == "interrupt":
        raise KeyboardInterrupt
    sys.exit(3)


register(exits)


def _types(run: Run) -> list[str]:
    return list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def _produce(run: Run) -> Step:
    return Step.objects.get(run=run, name="produce")


def test_a_step_the_deployed_definition_lacks_ends_in_a_takeover_naming_it(worker):
    run = start_run("faulty", thread_id="t-renamed", input={"case": "ok"})
    # A deploy renamed the step without a new workflow version.
    Step.objects.filter(pk=_produce(run).pk).update(name="produce_v0")
    step_id = Step.objects.get(run=run).pk
    for _ in range(3):
        outcome = executor.execute_step(step_id, worker)
        assert outcome.claimed
        # Retried with backoff like a dependency that is away; due now for the test.
        arrange(Step.objects.filter(pk=step_id, status=StepStatus.PENDING), not_before=Now())
    assert not executor.execute_step(step_id, worker).claimed

    step = Step.objects.get(pk=step_id)
    run.refresh_from_db()
    assert (step.status, step.attempt, step.error_code) == (StepStatus.FAILED, 3, "STEP_UNKNOWN")
    assert "no step 'produce_v0'" in step.error_detail and "produce, after" in step.error_detail
    assert run.status == RunStatus.PAUSED
    [takeover] = Takeover.objects.filter(run=run)
    assert takeover.cause == "unknown_workflow_version"
    assert "produce_v0" in takeover.reason and "faulty@1" in takeover.reason
    assert "declares the step" in takeover.suggested_action
    types = _types(run)
    assert types.count("step.started") == 3
    assert types.count("step.retry_scheduled") == 2
    assert types.count("step.failed") == 1 and "takeover.opened" in types


def test_an_approval_request_that_is_not_one_fails_the_attempt_with_its_cause(worker):
    run = start_run("asks_oddly", thread_id="t-odd-approval", input={"case": "x"})
    step = Step.objects.get(run=run, name="confirm")
    assert executor.execute_step(step.pk, worker).claimed
    step.refresh_from_db()
    run.refresh_from_db()
    assert (step.status, step.error_code) == (StepStatus.FAILED, "INVALID_OUTPUT")
    assert "must return {question, reason, evidence}, not str" in step.error_detail
    assert run.status == RunStatus.FAILED
    assert "step.failed" in _types(run)


def test_a_commit_the_database_refuses_fails_the_attempt_once(worker):
    run = start_run("faulty", thread_id="t-overflow", input={"case": "summary_overflow"})
    assert executor.execute_step(_produce(run).pk, worker).claimed
    step = _produce(run)
    run.refresh_from_db()
    assert (step.status, step.attempt, step.error_code) == (StepStatus.FAILED, 1, "INTERNAL")
    assert run.status == RunStatus.FAILED
    assert not Summary.objects.filter(run=run).exists()
    assert not Message.objects.filter(run=run, role="assistant").exists()
    types = _types(run)
    assert types.count("step.failed") == 1 and "step.succeeded" not in types


def test_a_stdout_that_went_away_does_not_fail_the_step(worker, monkeypatch):
    gone = io.StringIO()
    gone.close()
    monkeypatch.setattr(sys, "stdout", gone)
    run = start_run("faulty", thread_id="t-stdout", input={"case": "ok"})
    executor.run_chain(_produce(run).pk, worker)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("case", "detail"), [("exit", "sys.exit(3)"), ("interrupt", "KeyboardInterrupt")]
)
def test_a_steps_sys_exit_fails_the_attempt_not_the_worker(worker, case, detail):
    run = start_run("exits", thread_id="t-exit", input={"case": case})
    step = Step.objects.get(run=run, name="leave")
    # Raised out of the executor, either would end this test (a worker's process, or
    # the slot thread running it).
    assert executor.execute_step(step.pk, worker).claimed
    step.refresh_from_db()
    assert (step.status, step.attempt, step.error_code) == (
        StepStatus.FAILED,
        1,
        executor.STEP_EXITED,
    )
    assert detail in step.error_detail
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert _types(run).count("step.failed") == 1


def test_a_checkpoint_read_that_loses_the_database_after_a_batch_claim_gives_the_step_back(
    worker, monkeypatch
):
    run = start_run("faulty", thread_id="t-batch-fault", input={"case": "ok"})
    [claimed] = store().claim_due(worker.worker_id, 30, 5, known=registry.loaded_keys())
    assert claimed.pk == _produce(run).pk

    def lost(run):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(checkpoints, "latest", lost)
    assert executor.execute_claimed(claimed, worker).claimed
    step = _produce(run)
    # Given back uncounted, at once, instead of left RUNNING until its lease expires.
    assert (step.status, step.owner, step.attempt_base) == (StepStatus.PENDING, "", 1)
    released = Event.objects.get(run=run, type="step.released")
    assert released.payload["reason"] == "database fault"
