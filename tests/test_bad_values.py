"""Bad values, errors with NUL, Retry-After and failures after an unsafe call was sent:
each ends one attempt with its real cause (or settles the outcome), never a crashed
worker. Real database (PostgreSQL under ``make test``), in-process executor."""

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections

import tests.workflows.faulty as faulty
import tests.workflows.stored  # noqa: F401 - registers the workflows
from runs.engine.control.lifecycle import start_run
from runs.engine.execution import executor
from runs.engine.execution.worker import Worker
from runs.models import Event, Message, Operation, Run, Step
from runs.states import RunStatus, StepStatus
from tests.support.in_process import (  # noqa: F401
    actors,
    clients,
    device_dir,
    fast_passwords,
    run_worker_subprocess,
    worker_subprocess_env,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _start(case: str, **extra) -> Run:
    return start_run("faulty", thread_id=f"t-{case}", input={"case": case, **extra})


def _first_step(run: Run) -> Step:
    return Step.objects.get(run=run, name="produce")


@pytest.mark.parametrize(
    ("case", "path", "type_name"),
    [
        ("nan", "$.score", "float"),
        ("datetime", "$.at", "datetime"),
        ("int_key", "$.by_id[1]", "int"),
    ],
)
def test_it_fails_the_attempt_once_with_invalid_output(worker, case, path, type_name):
    run = _start(case)
    outcome = executor.execute_step(_first_step(run).pk, worker)
    assert outcome.claimed
    step = _first_step(run)
    run.refresh_from_db()
    assert (step.status, step.attempt, step.error_code) == (StepStatus.FAILED, 1, "INVALID_OUTPUT")
    assert f"output at {path}" in step.error_detail and type_name in step.error_detail
    assert run.status == RunStatus.FAILED and run.error_code == "INVALID_OUTPUT"
    assert not Event.objects.filter(run=run, type="step.retry_scheduled").exists()


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("sleep_huge", "sleep must be a number of seconds from 0 to 315360000"),
        ("sleep_past_bound", "sleep must be a number of seconds from 0 to 315360000"),
        ("sleep_nan", "sleep must be a number of seconds from 0 to 315360000"),
        ("sleep_text", "sleep must be a number of seconds, not str"),
        ("sleep_until_far", "sleep_until must be at most 315360000 seconds"),
    ],
)
def test_a_timer_no_database_time_can_hold_fails_the_attempt_once_with_its_cause(
    worker, case, said
):
    run = _start(case)
    outcome = executor.execute_step(_first_step(run).pk, worker)
    assert outcome.claimed
    step = _first_step(run)
    run.refresh_from_db()
    assert (step.status, step.attempt, step.error_code) == (
        StepStatus.FAILED,
        1,
        "INVALID_DURATION",
    )
    assert said in step.error_detail, step.error_detail
    assert run.status == RunStatus.FAILED and run.error_code == "INVALID_DURATION"
    assert not Event.objects.filter(run=run, type="step.retry_scheduled").exists()
    assert not Step.objects.filter(run=run, name="after").exists()


@pytest.mark.parametrize(
    ("case", "where", "type_name"),
    [
        ("tool_arguments", "tool arguments at $.score", "float"),
        ("tool_result", "tool result at $.at", "datetime"),
        ("message_content", "message content at $", "bytes"),
        ("message_tool_calls", "message tool calls at $[0].args[1]", "int"),
    ],
)
def test_it_fails_the_attempt_once_for_every_other_value_a_step_writes(
    worker, case, where, type_name
):
    run = _start(case)
    executor.execute_step(_first_step(run).pk, worker)
    step = _first_step(run)
    run.refresh_from_db()
    assert (step.status, step.attempt, step.error_code) == (StepStatus.FAILED, 1, "INVALID_OUTPUT")
    assert where in step.error_detail and f"({type_name})" in step.error_detail
    assert run.status == RunStatus.FAILED
    assert not Event.objects.filter(run=run, type="step.retry_scheduled").exists()
    assert not Message.objects.filter(run=run).exists()
    ops = list(Operation.objects.filter(run=run).values_list("status", "arguments", "result"))
    if case == "tool_arguments":
        assert ops == []  # refused before the call
    elif case == "tool_result":
        # The call happened: the row says so, with what came back as text.
        [(status, arguments, result)] = ops
        assert status == Operation.Status.SUCCEEDED and "datetime" in result["invalid_result"]


def test_it_stores_a_message_with_nul_escaped(worker):
    run = _start("message_nul")
    assert executor.run_chain(_first_step(run).pk, worker) == 2
    assert Message.objects.get(run=run).content == "bad\\u0000byte"


def test_it_stores_nul_escaped_in_outputs_and_the_next_step_sees_it(worker):
    run = _start("nul_text")
    assert executor.run_chain(_first_step(run).pk, worker) == 2
    after = Step.objects.get(run=run, name="after")
    assert after.output == {"seen": {"text": "bad\\u0000byte"}}


def test_it_records_an_error_with_nul_and_schedules_the_retry(worker, clients):  # noqa: F811
    run = _start("nul_error")
    executor.execute_step(_first_step(run).pk, worker)
    step = _first_step(run)
    assert step.status == StepStatus.PENDING and step.error_code == "DEPENDENCY_UNAVAILABLE"
    assert step.error_detail == "bad\\u0000byte"
    page = clients["alice"].get(f"/runs/{run.pk}/")
    assert "bad\\u0000byte" in page.content.decode()


@pytest.mark.parametrize(
    ("case", "code", "detail"),
    [
        ("long_code", "E" * 64, "a code longer than its column"),
        ("odd_error", "429", "{'detail': 'not text'}"),
    ],
)
def test_it_records_an_error_whose_code_or_detail_the_columns_cannot_hold(
    worker, case, code, detail
):
    run = _start(case)
    executor.execute_step(_first_step(run).pk, worker)
    step = _first_step(run)
    run.refresh_from_db()
    assert (step.status, step.attempt) == (StepStatus.FAILED, 1)
    assert (step.error_code, step.error_detail) == (code, detail)
    assert (run.status, run.error_code) == (RunStatus.FAILED, code)


def test_it_waits_as_long_as_retry_after_asks(worker):
    run = _start("retry_after")
    executor.execute_step(_first_step(run).pk, worker)
    step = _first_step(run)
    event = Event.objects.get(run=run, type="step.retry_scheduled")
    assert step.status == StepStatus.PENDING
    assert event.payload["retry_after_s"] == 120.0 and event.payload["delay_s"] >= 120.0
    assert step.not_before >= event.created_at + timedelta(seconds=119)


def test_it_settles_an_unsafe_call_that_failed_after_taking_effect_through_verify(worker):
    faulty.APPLIED.clear()
    run = _start("post")
    assert executor.run_chain(_first_step(run).pk, worker) == 2
    run.refresh_from_db()
    op = Operation.objects.get(run=run)
    assert run.status == RunStatus.SUCCEEDED
    assert op.status == Operation.Status.SUCCEEDED and op.result == {"posted": True}
    assert sum(faulty.APPLIED.values()) == 1
    verified = Event.objects.get(run=run, type="operation.verified")
    assert verified.payload["answer"] == "done" and "HTTP 500" in verified.payload["after"]


def test_the_worker_loop_goes_on_after_a_bad_step_and_runs_the_next_run():
    bad = _start("datetime")
    good = _start("ok")
    Worker(mode="db", burst=True).run()
    bad.refresh_from_db()
    good.refresh_from_db()
    assert bad.status == RunStatus.FAILED and bad.error_code == "INVALID_OUTPUT"
    assert good.status == RunStatus.SUCCEEDED


def test_a_worker_process_survives_every_kind_of_bad_value_and_runs_the_next_run(
    settings,
    device_dir,  # noqa: F811
):
    """A real worker subprocess: bad values in an output, a tool result, an artifact's
    metadata and an approval request each fail their own run once; the worker exits 0
    after running the healthy run queued behind them."""
    bad = [
        _start("nan"),
        _start("tool_result"),
        start_run("stored_artifact", thread_id="t-art", input={"bad": "datetime"}),
        start_run("stored_approval", thread_id="t-appr", input={"bad": "nan"}),
    ]
    good = _start("ok")
    env = worker_subprocess_env(
        settings, AGENTOPS_EXTRA_WORKFLOW_MODULES="tests.workflows.faulty,tests.workflows.stored"
    )
    proc = run_worker_subprocess(env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for run in bad:
        run.refresh_from_db()
        assert (run.status, run.error_code) == (RunStatus.FAILED, "INVALID_OUTPUT"), run.workflow
        assert Step.objects.filter(run=run).order_by("seq").first().attempt == 1
    good.refresh_from_db()
    assert good.status == RunStatus.SUCCEEDED


@pytest.mark.services
def test_a_heartbeat_that_cannot_renew_stops_the_step_before_its_side_effect(settings, worker):
    """Fail closed: the step row is locked elsewhere, so every renewal waits and fails;
    the step stops at its next safe point before the lease runs out, and makes no call."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (make test)")
    settings.AGENTOPS_LEASE_SECONDS = 3
    settings.AGENTOPS_DB_TIMEOUTS = {**settings.AGENTOPS_DB_TIMEOUTS, "cli": (0.5, 0)}
    faulty.APPLIED.clear()
    faulty.HOLD_ENDED.clear()
    run = _start("hold_then_post", seconds="6")
    step = _first_step(run)

    def run_step():
        try:
            executor.execute_step(step.pk, worker)
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=run_step)
    thread.start()
    wait_until(
        lambda: _first_step(run).status == StepStatus.RUNNING, what="the step to run", timeout=30
    )
    other = connections.create_connection("default")
    other.set_autocommit(False)
    with other.cursor() as cursor:
        cursor.execute("SELECT id FROM runs_step WHERE id = %s FOR NO KEY UPDATE", [step.pk])
    # Renewals fail from here on; after two thirds of the lease the step stops.
    wait_until(faulty.HOLD_ENDED.is_set, what="the step to stop at a safe point", timeout=30)
    other.rollback()
    other.close()
    thread.join(60)
    assert not thread.is_alive()
    assert faulty.APPLIED == {}
    assert Event.objects.filter(run=run, type="step.abandoned").exists()
    assert not Operation.objects.filter(run=run).exists()


def test_runs_status_shows_step_outputs_and_the_result_escaped_and_cut(worker):
    """Untrusted output on the terminal: escapes written out, each line cut; ``--json``
    has the outputs and the result whole."""
    from io import StringIO

    from django.core.management import call_command

    run = _start("terminal_text")
    assert executor.run_chain(_first_step(run).pk, worker) == 2
    out = StringIO()
    call_command("runs", "status", str(run.pk), stdout=out)
    text = out.getvalue()
    assert "\x1b" not in text and "\u202e" not in text
    produce = next(line for line in text.splitlines() if "step produce" in line)
    assert '-> {"text": "\\u001b[31mred\\u202eyyy' in produce
    assert produce.endswith("... (331 characters)")
    result = next(line for line in text.splitlines() if line.startswith("result: "))
    assert result.startswith('result: {"seen": {"text": "\\u001b[31mred') and "..." in result

    out = StringIO()
    call_command("runs", "status", str(run.pk), "--json", stdout=out)
    status = json.loads(out.getvalue())
    whole = {"text": "\x1b[31mred\u202e" + "y" * 300}
    assert [s["output"] for s in status["steps"]] == [whole, {"seen": whole}]
    assert status["result"] == {"seen": whole}
