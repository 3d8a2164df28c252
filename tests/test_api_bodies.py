"""What the API refuses before any view runs, and the shape of every error under
/api/v1/: text no database stores as sent (lone surrogates, NUL) anywhere in a
JSON body, unknown paths, wrong methods, and the SSE stream's resume position."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apitokens.services import create_token
from runs.engine.control.lifecycle import ControlError, start_run
from runs.engine.control.preconditions import run_etag
from runs.engine.control.rewind import resume_from_checkpoint
from runs.models import Approval, Event, Message, Run, Step, Thread

pytestmark = pytest.mark.django_db

QUESTION = {"question": "How warm is the living room?"}
BODY = {"workflow": "room_temperature", "thread_id": "t1", "input": QUESTION}


@pytest.fixture
def alice():
    return User.objects.create_user("alice")


@pytest.fixture
def client(alice) -> Client:
    _, raw = create_token(alice)
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def raw_post(client: Client, path: str, text: str, **headers):
    """POST ``text`` as sent: ``json.dumps`` writes a lone surrogate as ``\\ud800``."""
    return client.post(path, text, content_type="application/json", **headers)


def written() -> tuple[int, int, int, int]:
    return (
        Run.objects.count(),
        Thread.objects.count(),
        Message.objects.count(),
        Event.objects.count(),
    )


def assert_refused(response, field: str) -> None:
    assert response.status_code == 422, response.content
    body = response.json()
    assert set(body) == {"code", "message", "errors"}
    # A thread id's bad character is refused with the thread id's code, as the engine's.
    assert body["code"] == ("invalid_thread" if field == "thread_id" else "invalid_input")
    assert field in body["errors"], body


CREATE_BODIES = [
    ({**BODY, "input": {"question": "\ud800"}}, "input.question"),
    ({**BODY, "input": {"question": "ok", "\udfff": 1}}, "input"),
    ({**BODY, "input": {"question": "ok", "k\x00": 1}}, "input"),
    ({**BODY, "input": {"question": "a\x00b"}}, "input.question"),
    ({**BODY, "input": {"question": "ok", "notes": ["x", {"y": "\udc00"}]}}, "input.notes[1].y"),
    ({"workflow": "weekly_report", "thread_id": "w1", "input": {"week": "\udfff"}}, "input.week"),
    ({**BODY, "thread_id": "t\ud800"}, "thread_id"),
    ({**BODY, "budget": {"\ud800": 1}}, "budget"),
]


@pytest.mark.parametrize(("body", "field"), CREATE_BODIES)
def test_it_refuses_unstorable_values_anywhere_in_a_new_run(client, body, field):
    response = raw_post(client, "/api/v1/runs", json.dumps(body), HTTP_IDEMPOTENCY_KEY="k1")
    assert_refused(response, field)
    assert written() == (0, 0, 0, 0)


@pytest.fixture
def run(alice):
    return start_run(
        "room_temperature", thread_id="t1", input=QUESTION, owner=alice, actor="user:alice"
    )


def action_bodies(run: Run) -> list[tuple[str, dict, str]]:
    approval = Approval.objects.create(run=run, step=Step.objects.get(run=run), question="Send it?")
    return [
        (
            f"/api/v1/runs/{run.pk}/resume",
            {"checkpoint": "start", "input_patch": {"question": "\udfff"}, "reason": "r"},
            "input_patch.question",
        ),
        (f"/api/v1/runs/{run.pk}/resume", {"checkpoint": "start\x00", "reason": "r"}, "checkpoint"),
        (f"/api/v1/runs/{run.pk}/cancel", {"reason": "\ud800"}, "reason"),
        (f"/api/v1/runs/{run.pk}/retry", {"reason": "x\x00"}, "reason"),
        (
            f"/api/v1/runs/{run.pk}/steps/read_temperature/resolve",
            {"outcome": "done", "evidence": "seen", "result": {"t": ["\ud800"]}},
            "result.t[0]",
        ),
        (f"/api/v1/runs/{run.pk}/replay", {"reason": "again \udfff"}, "reason"),
        ("/api/v1/replays", {"reason": "r", "workflow": "\ud800"}, "workflow"),
        (
            f"/api/v1/approvals/{approval.pk}/decide",
            {"decision": "approve", "arguments": {"to": "\ud800"}},
            "arguments.to",
        ),
        (
            f"/api/v1/approvals/{approval.pk}/decide",
            {"decision": "reject", "message": "no\x00"},
            "message",
        ),
    ]


def test_it_refuses_unstorable_values_in_every_action_and_changes_nothing(client, run):
    requests = action_bodies(run)
    before = (written(), run_etag(run), Approval.objects.filter(status="PENDING").count())
    for path, body, field in requests:
        response = raw_post(
            client, path, json.dumps(body), HTTP_IF_MATCH=run_etag(run), HTTP_IDEMPOTENCY_KEY="k"
        )
        assert_refused(response, field)
        run.refresh_from_db()
        after = (written(), run_etag(run), Approval.objects.filter(status="PENDING").count())
        assert after == before, path


def test_it_still_takes_the_same_requests_with_storable_values(client, run):
    body = {
        "checkpoint": "start",
        "input_patch": {"question": "How warm is the attic?"},
        "reason": "the attic",
    }
    response = raw_post(
        client, f"/api/v1/runs/{run.pk}/resume", json.dumps(body), HTTP_IF_MATCH=run_etag(run)
    )
    assert response.status_code == 200, response.content
    document = response.json()
    assert document["input"] == QUESTION
    assert document["effective_input"] == {"question": "How warm is the attic?"}
    again = client.get(f"/api/v1/runs/{run.pk}").json()
    assert (again["input"], again["effective_input"]) == (QUESTION, body["input_patch"])


def test_it_shows_the_started_input_as_the_effective_one_until_a_resume_patches_it(client, run):
    document = client.get(f"/api/v1/runs/{run.pk}").json()
    assert document["input"] == document["effective_input"] == QUESTION


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("get", "/api/v1/nosuch", 404, "not_found"),
        ("post", "/api/v1/runs/nosuch/deeper", 404, "not_found"),
        ("get", "/api/v1/runs/{run}/cancel", 405, "method_not_allowed"),
        ("delete", "/api/v1/runs/{run}", 405, "method_not_allowed"),
        ("put", "/api/v1/runs", 405, "method_not_allowed"),
        ("patch", "/api/v1/runs/{run}/resume", 405, "method_not_allowed"),
    ],
)
def test_it_answers_every_error_as_json(client, run, method, path, status, code):
    response = getattr(client, method)(path.format(run=run.pk))
    assert response.status_code == status
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"code", "message", "errors"} and body["code"] == code
    if status == 405:
        assert method.upper() not in response["Allow"] and response["Allow"]


def test_it_answers_unauthenticated_unknown_paths_as_json():
    response = Client().get("/api/v1/nosuch")
    assert (response.status_code, response.json()["code"]) == (404, "not_found")


@pytest.mark.parametrize("path", ["/api/v1/runs", "/api/v1/nosuch"])
def test_it_answers_a_host_outside_allowed_hosts_as_json(path):
    response = Client().get(path, HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["code"] == "bad_request"
    outside = Client().get("/runs/", HTTP_HOST="evil.example")
    assert outside.status_code == 400
    assert not outside["Content-Type"].startswith("application/json")


def test_it_leaves_errors_outside_the_api_alone(client):
    response = client.get("/nosuch-page")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")


def test_it_documents_405_on_every_operation(client):
    schema = client.get("/api/v1/openapi.json").json()
    operations = [op for item in schema["paths"].values() for op in item.values()]
    missing = [op["operationId"] for op in operations if "405" not in op["responses"]]
    assert operations and not missing


# Signed, padded or zero-led values are refused by the header and the parameter alike
# (" 3" is what ``?last_event_id=+3`` decodes to).
BAD_SEQS = [
    "99999999999999999999999", "-7", "+7", "+3", " 3", "3 ", "0003", "00", "1.5", "x",
    "\u0663", "2147483648", "9" * 5000,
]  # fmt: skip


@pytest.mark.parametrize("value", BAD_SEQS)
def test_it_refuses_a_bad_last_event_id_header(client, run, value):
    response = client.get(f"/api/v1/runs/{run.pk}/stream", HTTP_LAST_EVENT_ID=value)
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "invalid_last_event_id" and "Last-Event-ID" in body["errors"]


@pytest.mark.parametrize("value", BAD_SEQS)
def test_it_refuses_a_bad_last_event_id_parameter(client, run, value):
    response = client.get(f"/api/v1/runs/{run.pk}/stream", {"last_event_id": value})
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "invalid_last_event_id" and "last_event_id" in body["errors"]


def test_it_refuses_a_plus_sign_left_unencoded_in_the_url(client, run):
    # "+3" in a query string decodes to " 3": refused as the header "+3" is.
    response = client.get(f"/api/v1/runs/{run.pk}/stream?last_event_id=+3")
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_last_event_id"


@pytest.mark.django_db(transaction=True)  # the stream reads the token on another thread
@pytest.mark.parametrize("value", ["0", "3", "2147483647"])
def test_it_takes_a_good_last_event_id_either_way(client, run, value):
    for extra in ({"HTTP_LAST_EVENT_ID": value}, {"data": {"last_event_id": value}}):
        response = client.get(f"/api/v1/runs/{run.pk}/stream", **extra)
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/event-stream")
        response.close()


@pytest.mark.parametrize(
    ("patch", "field"),
    [({"question": "\udfff"}, "input_patch.question"), ({"n": [float("nan")]}, "input_patch.n[0]")],
)
def test_the_engine_refuses_an_unstorable_input_patch_for_every_caller(run, patch, field):
    events = Event.objects.filter(run=run).count()
    with pytest.raises(ControlError) as refused:
        resume_from_checkpoint(run, "start", actor="cli", input_patch=patch, reason="r")
    assert refused.value.code == "invalid_input" and field in refused.value.errors
    run.refresh_from_db()
    assert (run.generation, Event.objects.filter(run=run).count()) == (1, events)


def test_it_answers_a_server_failure_as_json(client, run, monkeypatch):
    def broken(user, run_id):
        raise RuntimeError("a bug")

    monkeypatch.setattr("runs.api.runs.access.get_run", broken)
    client.raise_request_exception = False
    response = client.get(f"/api/v1/runs/{run.pk}")
    assert response.status_code == 500
    assert response.json()["code"] == "internal_error"


@pytest.mark.parametrize(
    ("workflow", "data", "field"),
    [
        ("room_temperature", {"question": "\ud800"}, "input.question"),
        ("weekly_report", {"week": "\udfff"}, "input.week"),
    ],
)
def test_the_engine_refuses_a_lone_surrogate_when_a_run_starts_from_any_caller(
    workflow, data, field
):
    with pytest.raises(ControlError) as refused:
        start_run(workflow, thread_id="t1", input=data)
    assert refused.value.code == "invalid_input" and field in refused.value.errors
    assert written() == (0, 0, 0, 0)


#: JSON nested far deeper than ``values.MAX_DEPTH``: Python's own parser would recurse
#: out of its stack on it.
DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/runs",
        "/api/v1/runs/{run}/signals/payment",
        "/api/v1/runs/{run}/tool-calls/call-1/result",
        "/api/v1/runs/{run}/cancel",
        "/api/v1/schedules",
        "/api/v1/hooks/payments",
    ],
)
def test_it_refuses_json_nested_too_deep_in_every_body_as_invalid_json(client, run, settings, path):
    from runs.api.signals import SIGNATURE_HEADER, sign

    settings.AGENTOPS_SIGNAL_HOOKS = {
        "payments": {"secret": "s", "signal": "payment", "field": "order", "by": "thread"}
    }
    before = written()
    response = raw_post(
        client,
        path.format(run=run.pk),
        DEEP,
        HTTP_IDEMPOTENCY_KEY="deep",
        HTTP_IF_MATCH=run_etag(run),
        **{f"HTTP_{SIGNATURE_HEADER.upper().replace('-', '_')}": sign("s", DEEP.encode())},
    )
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_json"
    assert written() == before


def test_the_engine_refuses_nul_in_a_signal_payload_from_any_caller(alice):
    from runs.engine.control.waits import deliver_signal
    from runs.models import Signal

    order = start_run(
        "order_followup", thread_id="o1", input={"order": "o1", "delay_s": 0}, owner=alice
    )
    with pytest.raises(ControlError) as refused:
        deliver_signal(order.pk, "payment", {"amount": 1, "x": "a\x00"}, actor="cli")
    assert refused.value.code == "invalid_input" and "payload.x" in refused.value.errors
    assert Signal.objects.count() == 0


@pytest.mark.parametrize("delay", [99999999999999999999999, 315_360_001, -1])
def test_the_engine_refuses_an_order_delay_that_no_timer_can_hold(delay):
    with pytest.raises(ControlError) as refused:
        start_run("order_followup", thread_id="o1", input={"order": "o1", "delay_s": delay})
    assert refused.value.code == "invalid_input" and "input.delay_s" in refused.value.errors
    assert written() == (0, 0, 0, 0)
