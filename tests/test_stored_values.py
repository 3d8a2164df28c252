"""Every value the engine writes is checked before it reaches the database, wherever it
goes (events, artifact metadata and names, approval requests, ledger rows, any JSON or
text column): from a step, a value that cannot be stored faithfully fails the attempt
once with ``INVALID_OUTPUT`` naming the path and type; from a client or an operator it
is a 422 with code ``invalid_input`` and nothing stored (an operator's text with NUL
included); text with NUL that the engine itself writes is stored escaped. Real
database (PostgreSQL under ``make test``), in-process executor."""

import json
from datetime import UTC, datetime

import pytest
from django.core.files.storage import default_storage
from django.db import transaction
from django.test import Client
from django.urls import reverse

import tests.workflows.stored as stored
from apitokens.services import create_token
from runs.console.access import form_version
from runs.engine.control.cancel import request_cancel
from runs.engine.control.lifecycle import ControlError, start_run
from runs.engine.data.inbox import post_message
from runs.engine.execution import executor
from runs.engine.rules import InputRefused
from runs.engine.state.gateway import run_transaction
from runs.engine.state.values import NUL_ESCAPE, InvalidValue
from runs.models import Approval, Artifact, Event, Message, Operation, Run, Step, Takeover
from runs.states import RunStatus, StepStatus
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_in_process, start_room_temperature

pytestmark = pytest.mark.django_db(transaction=True)

ESCAPED = f"bad{NUL_ESCAPE}byte"

#: Values no database stores faithfully, with the path and type the error names.
BAD_VALUES = [
    pytest.param(value, path, type_name, id=name)
    for name, (value, path, type_name) in stored.BAD.items()
]


def _only_step(run: Run) -> Step:
    return Step.objects.get(run=run)


def _assert_failed_once(run: Run, where: str, path: str, type_name: str) -> Step:
    step = Step.objects.filter(run=run).order_by("seq").first()
    run.refresh_from_db()
    assert (step.status, step.attempt, step.error_code) == (StepStatus.FAILED, 1, "INVALID_OUTPUT")
    assert f"{where} at {path}" in step.error_detail and f"({type_name})" in step.error_detail
    assert (run.status, run.error_code) == (RunStatus.FAILED, "INVALID_OUTPUT")
    assert not Event.objects.filter(run=run, type="step.retry_scheduled").exists()
    return step


# -- from a step: the attempt fails once ------------------------------------------------


@pytest.mark.parametrize(("value", "path", "type_name"), BAD_VALUES)
def test_it_fails_the_attempt_for_artifact_metadata_that_cannot_be_stored(
    worker, value, path, type_name
):
    name = next(k for k, v in stored.BAD.items() if v[0] is value)
    run = start_run("stored_artifact", thread_id=f"t-{name}", input={"bad": name})
    executor.execute_step(_only_step(run).pk, worker)
    _assert_failed_once(run, "artifact metadata", path, type_name)
    assert not Artifact.objects.filter(run=run).exists()
    assert not default_storage.exists(f"runs/{run.pk}")  # checked before the file


def test_it_fails_the_attempt_for_an_artifact_name_with_nul(worker):
    run = start_run("stored_artifact", thread_id="t-nul-name", input={"bad": "nul_name"})
    executor.execute_step(_only_step(run).pk, worker)
    _assert_failed_once(run, "artifact name", "$", "str")
    assert not Artifact.objects.filter(run=run).exists()


@pytest.mark.parametrize(("value", "path", "type_name"), BAD_VALUES)
def test_it_fails_the_attempt_for_an_approval_request_that_cannot_be_stored(
    worker, value, path, type_name
):
    name = next(k for k, v in stored.BAD.items() if v[0] is value)
    run = start_run("stored_approval", thread_id=f"t-{name}", input={"bad": name})
    executor.execute_step(_only_step(run).pk, worker)
    _assert_failed_once(run, "approval request", f"$.evidence{path[1:]}", type_name)
    assert not Approval.objects.filter(run=run).exists()


def test_it_stores_an_approval_request_with_nul_escaped_in_the_row_and_its_event(worker):
    run = start_run("stored_approval", thread_id="t-nul", input={"bad": "nul_text"})
    executor.execute_step(_only_step(run).pk, worker)
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_APPROVAL
    approval = Approval.objects.get(run=run)
    assert (approval.question, approval.reason) == (f"ship{NUL_ESCAPE}it?", f"why{NUL_ESCAPE}not")
    assert approval.evidence == {f"k{NUL_ESCAPE}": f"v{NUL_ESCAPE}"}
    event = Event.objects.get(run=run, type="approval.requested")
    assert event.payload["question"] == f"ship{NUL_ESCAPE}it?"


# -- the field check itself: every JSON column, every write path ------------------------


@pytest.mark.parametrize(("value", "path", "type_name"), BAD_VALUES)
def test_an_event_payload_that_cannot_be_stored_is_refused_and_nothing_is_written(
    value, path, type_name
):
    run = start_room_temperature("T-event")
    before = (Event.objects.filter(run=run).count(), Run.objects.get(pk=run.pk).event_seq)
    with pytest.raises(InvalidValue) as caught, run_transaction(run.pk) as tx:
        tx.event("test.value", {"value": value})
    assert (caught.value.where, caught.value.path) == ("Event.payload", f"$.value{path[1:]}")
    assert caught.value.type_name == type_name
    after = (Event.objects.filter(run=run).count(), Run.objects.get(pk=run.pk).event_seq)
    assert after == before


def test_an_event_payload_with_nul_is_stored_escaped():
    run = start_room_temperature("T-event-nul")
    with run_transaction(run.pk) as tx:
        tx.event("test.value", {"text": "bad\x00byte", "k\x00": ["bad\x00byte"]})
    event = Event.objects.get(run=run, type="test.value")
    assert event.payload == {"text": ESCAPED, f"k{NUL_ESCAPE}": [ESCAPED]}


def test_every_write_path_of_a_json_column_is_checked():
    run = start_room_temperature("T-paths")
    step = Step.objects.get(run=run)
    bad = {"at": datetime(2026, 1, 1, tzinfo=UTC)}
    attempts = {
        "create": lambda: Artifact.objects.create(
            run=run, step=step, kind="file", name="a", uri="u", checksum="c", size=0, metadata=bad
        ),
        "bulk_create": lambda: Operation.objects.bulk_create(
            [Operation(run=run, step=step, idempotency_key="k", tool="t", arguments=bad)]
        ),
        "update": lambda: Run.objects.filter(pk=run.pk).update(input=bad),
        "save": lambda: Takeover.objects.create(
            run=run, cause="retries_exhausted", reason="r", evidence=bad
        ),
    }
    for how, write in attempts.items():
        with pytest.raises(InvalidValue) as caught, transaction.atomic():
            write()
        assert (caught.value.path, caught.value.type_name) == ("$.at", "datetime"), how
    assert not Artifact.objects.filter(run=run).exists()
    assert not Operation.objects.filter(run=run).exists()
    assert not Takeover.objects.filter(run=run).exists()
    assert Run.objects.get(pk=run.pk).input == {"question": "How warm is the living room?"}


def test_text_columns_store_nul_escaped_and_lookups_find_it():
    run = start_room_temperature("T-text")
    Run.objects.filter(pk=run.pk).update(cancel_reason="bad\x00byte", request_id="r\x00")
    row = Run.objects.get(pk=run.pk)
    assert (row.cancel_reason, row.request_id) == (ESCAPED, f"r{NUL_ESCAPE}")
    assert Run.objects.filter(request_id="r\x00").get() == row
    assert Run.objects.filter(cancel_reason__contains="\x00").get() == row
    assert Run.objects.filter(cancel_reason__istartswith="BAD\x00").get() == row
    assert Run.objects.filter(request_id__endswith="\x00").get() == row


@pytest.mark.parametrize(
    ("call", "code", "field"),
    [
        (
            lambda t: start_run("room_temperature", thread_id=t, input={"question": "q"}),
            "invalid_thread",
            "thread_id",
        ),
        (lambda t: post_message(t, "How warm is it?"), "invalid_thread", "thread_id"),
        (lambda t: post_message("t-ok", t), "invalid_message", "content"),
        (
            lambda t: post_message("t-ok", "How warm?", request_id=t),
            "invalid_idempotency_key",
            "request_id",
        ),
    ],
    ids=["start_run thread", "message thread", "message content", "message request id"],
)
@pytest.mark.parametrize("text", ["a\x00b", "a\ud800b"], ids=["nul", "surrogate"])
def test_the_engine_refuses_text_inputs_no_database_stores(call, code, field, text):
    """Thread ids, message texts and request ids: a ``ControlError`` naming the field,
    never an ``InvalidValue`` from deep in a write, and nothing stored."""
    with pytest.raises(ControlError) as refused:
        call(text)
    assert (refused.value.code, list(refused.value.errors)) == (code, [field])
    assert not Run.objects.exists() and not Message.objects.exists()


def test_the_console_search_refuses_nul(clients):
    start_room_temperature("T-search")
    page = clients["alice"].get(reverse("console:runs"), {"q": "warm\x00"})
    assert page.status_code == 400
    assert "a lone surrogate, which cannot be stored. Nothing was done." in page.content.decode()


# -- from a client or an operator: 4xx with a code, nothing stored ----------------------


def _api(user) -> Client:
    _, raw = create_token(user)
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"question": "q", "x": NaN}', "input.x"),
        ('{"question": "q", "x": [Infinity]}', "input.x[0]"),
        ('{"question": "q", "x": {"y": -Infinity}}', "input.x.y"),
        ('{"question": "q", "x": 1e300}', "input.x"),
    ],
)
def test_the_api_refuses_an_input_no_database_stores_with_422(actors, body, field):
    api = _api(actors["alice"])
    raw = f'{{"workflow": "room_temperature", "thread_id": "t-api", "input": {body}}}'
    response = api.post("/api/v1/runs", raw, content_type="application/json")
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "invalid_input"
    assert list(response.json()["errors"]) == [field]
    assert "(float)" in response.json()["errors"][field]
    assert not Run.objects.exists()


def test_a_checked_field_refusal_inside_a_request_is_a_422_with_a_code(actors, monkeypatch):
    """The last line of defence: a value no earlier check caught is refused by the field,
    answered 422 ``invalid_input`` naming the column and path, and nothing is stored."""
    monkeypatch.setattr("runs.engine.rules.values.problem", lambda value: None)
    api = _api(actors["alice"])
    raw = (
        '{"workflow": "room_temperature", "thread_id": "t-api",'
        ' "input": {"question": "q", "x": NaN}}'
    )
    response = api.post("/api/v1/runs", raw, content_type="application/json")
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "invalid_input"
    assert response.json()["errors"] == {"Run.input.x": "nan is not a JSON number"}
    assert not Run.objects.exists()


def test_the_api_refuses_nul_in_a_body_and_a_query(actors):
    api = _api(actors["alice"])
    body = {"workflow": "room_temperature", "thread_id": "t-api", "input": {"question": "a\x00"}}
    response = api.post("/api/v1/runs", json.dumps(body), content_type="application/json")
    assert (response.status_code, response.json()["code"]) == (422, "invalid_input")
    assert list(response.json()["errors"]) == ["input.question"]
    assert api.get("/api/v1/runs", {"status": "a\x00"}).status_code == 400
    assert not Run.objects.exists()


def test_a_reason_with_nul_is_refused_by_the_engine_and_nothing_is_written():
    """The faces refuse NUL before the engine; a caller of the engine that passes it
    gets the same ``invalid_input`` (the reason is stored as sent or not at all)."""
    run = start_room_temperature("T-console")
    events = Event.objects.filter(run=run).count()
    with pytest.raises(InputRefused) as refused:
        request_cancel(run, actor="cli", reason="stop\x00now")
    assert (refused.value.code, refused.value.field) == ("invalid_input", "reason")
    assert Event.objects.filter(run=run).count() == events
    run.refresh_from_db()
    assert not run.cancel_requested_at


def test_the_console_refuses_an_input_patch_no_database_stores(clients):
    run = start_room_temperature("T-patch", budget={"model_calls": 0})
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED
    events_before = Event.objects.filter(run=run).count()
    response = clients["bob"].post(
        reverse("console:resume_preview", args=[run.pk]),
        {
            "checkpoint": "start",
            "reason": "try again",
            "input_patch": '{"question": NaN}',
            "run_version": form_version(run),
        },
    )
    assert response.status_code == 400
    assert "cannot be stored: at $.question" in response.content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED
    assert Event.objects.filter(run=run).count() == events_before


def test_the_middleware_answers_422_for_a_value_a_field_refused(rf):
    """Outside the API's own handler (a console view, a plain Django view)."""
    from agentops.middleware import InvalidValueMiddleware

    refused = InvalidValue("Run.input", "$.x", "float", "nan is not a JSON number")
    middleware = InvalidValueMiddleware(lambda request: None)
    page = middleware.process_exception(rf.post("/runs/"), refused)
    assert page.status_code == 422 and "Value not accepted" in page.content.decode()
    body = middleware.process_exception(rf.post("/api/v1/other"), refused)
    assert body.status_code == 422
    assert json.loads(body.content) == {
        "code": "invalid_input",
        "message": "Run.input at $.x: nan is not a JSON number (float)",
        "errors": {"Run.input.x": "nan is not a JSON number"},
    }
    assert middleware.process_exception(rf.post("/runs/"), ValueError("other")) is None
