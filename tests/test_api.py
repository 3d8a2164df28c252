"""The JSON API through the Django test client: tokens, ownership, idempotency, bad
input, limits and throttling. Real database (PostgreSQL under `make test`)."""

import hashlib
import json
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from schemathesis.specs.openapi.adapter.validators import validate_v3

import agentops_client
from agentops_client import ApiError, Budget, Usage
from agentops_client.models import build
from apitokens.models import ApiToken
from apitokens.services import create_token
from runs.engine.control.cancel import request_cancel
from runs.engine.control.lifecycle import start_run
from runs.engine.control.preconditions import run_etag
from runs.models import Approval, Message, Run, Step, Thread
from tests.support.api_client import in_process_client

pytestmark = pytest.mark.django_db

QUESTION = {"question": "How warm is the living room?"}
BODY = {"workflow": "room_temperature", "thread_id": "t1", "input": QUESTION}
#: ``BODY`` as ``agentops_client.Client.start_run`` arguments.
START = {"workflow": "room_temperature", "thread_id": "t1", "input": QUESTION}


def client_for(user) -> Client:
    _, raw = create_token(user)
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def api_for(user):
    """``agentops_client.Client`` with a new token of ``user``, served in-process."""
    _, raw = create_token(user)
    return in_process_client(raw)


def post(client: Client, path: str, body, **headers):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(path, data, content_type="application/json", **headers)


def act(client: Client, path: str, body, run: Run, **headers):
    """POST an action on ``run`` with its current ETag as ``If-Match``."""
    run.refresh_from_db()
    return post(client, path, body, HTTP_IF_MATCH=run_etag(run), **headers)


@pytest.fixture
def alice():
    return User.objects.create_user("alice")


@pytest.fixture
def bob():
    return User.objects.create_user("bob")


@pytest.fixture
def bobs_run(bob):
    run = start_run(
        "room_temperature", thread_id="bob-thread", input=QUESTION, owner=bob, actor="user:bob"
    )
    step = Step.objects.get(run=run)
    approval = Approval.objects.create(run=run, step=step, question="Send it?")
    return run, approval


def test_it_serves_an_openapi_3_schema_and_docs():
    schema = Client().get("/api/v1/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    # The OpenAPI 3.x meta-schema (as shipped with schemathesis) accepts it; this raises
    # a ValidationError naming the offending part otherwise.
    validate_v3(schema)
    assert "/api/v1/runs" in schema["paths"]
    assert "/api/v1/runs/{run_id}/stream" in schema["paths"]
    assert Client().get("/api/v1/docs").status_code == 200


def test_it_refuses_requests_without_a_valid_token(alice):
    assert Client().get("/api/v1/runs").json()["code"] == "unauthorized"
    response = Client(HTTP_AUTHORIZATION="Bearer ao_nope").get("/api/v1/runs")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"


def test_it_creates_a_run_once_per_idempotency_key(alice):
    first = post(client_for(alice), "/api/v1/runs", BODY, HTTP_IDEMPOTENCY_KEY="k1")
    again = api_for(alice).start_run(**START, idempotency_key="k1")
    assert (first.status_code, again.replayed) == (201, True)
    assert again == build(agentops_client.Run, first.json())
    assert first["Location"] == f"/api/v1/runs/{first.json()['id']}"
    assert Run.objects.filter(owner=alice).count() == 1
    run = Run.objects.get()
    assert run.request_id == "k1" and len(run.request_fingerprint) == 64


def test_a_retry_gets_the_first_response_not_the_run_as_it_is_now(alice):
    client = client_for(alice)
    first = post(client, "/api/v1/runs", BODY, HTTP_IDEMPOTENCY_KEY="k1")
    run = Run.objects.get()
    request_cancel(run, actor="user:alice", reason="changed my mind")
    again = post(client, "/api/v1/runs", BODY, HTTP_IDEMPOTENCY_KEY="k1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.content == first.content and first.json()["status"] == "PENDING"
    assert again["Idempotent-Replayed"] == "true"
    assert client.get(f"/api/v1/runs/{run.pk}").json()["status"] == "CANCELLED"
    assert Run.objects.count() == 1


def test_it_refuses_a_reused_key_with_a_different_body(alice):
    client = client_for(alice)
    post(client, "/api/v1/runs", BODY, HTTP_IDEMPOTENCY_KEY="k1")
    response = post(client, "/api/v1/runs", {**BODY, "thread_id": "t2"}, HTTP_IDEMPOTENCY_KEY="k1")
    assert response.status_code == 422
    assert response.json()["code"] == "idempotency_key_reused"
    assert Run.objects.count() == 1
    assert not Thread.objects.filter(thread_id="t2").exists()


def test_it_scopes_idempotency_keys_to_their_owner(alice, bob):
    a = api_for(alice).start_run(**START, idempotency_key="k1")
    b = api_for(bob).start_run(**START, idempotency_key="k1")
    assert (a.replayed, b.replayed) == (False, False)
    assert a.id != b.id


def test_it_reads_lists_and_reports_a_run(alice):
    api = api_for(alice)
    created = api.start_run(**START, budget={"model_calls": 5, "cost_usd": "0.10"})
    run = api.get_run(created.id)
    assert run.status == "PENDING" and run.next_step == "plan"
    assert run.budget == Budget(
        limits={"model_calls": 5, "cost_usd": "0.10"},
        used=Usage(
            model_calls=0,
            tool_calls=0,
            tokens=0,
            cost_usd="0.000000",
            cost_usd_priced="0.000000",
            unpriced_model_calls=0,
        ),
    )
    assert [s.name for s in run.steps] == ["plan"]
    with_null = api.start_run(**{**START, "input": {**QUESTION, "note": None}})
    assert with_null.input == {**QUESTION, "note": None}
    listing = api.list_runs(status="PENDING", thread_id="t1")
    assert created.id in {r.id for r in listing.items} and listing.count == 2
    assert api.list_runs(status="FAILED").count == 0
    assert api.list_runs(q="warm").count == 2
    assert api.list_runs(q=created.id[:8]).count == 1
    assert api.list_runs(stuck=True).count == 0
    assert api.list_runs(has_unknown=False).count == 2
    events = api.events(created, after=1)
    assert [e.seq for e in events.items] == [2, 3] and events.last_seq == 3
    messages = api.messages("t1")
    assert [(m.role, m.content, m.status) for m in messages] == [
        ("user", QUESTION["question"], "final")
    ] * 2
    assert [c.name for c in api.checkpoints(created)] == ["start"]


@pytest.mark.parametrize("thread_id", ["a/b", "a b", "q?x=1#f", "ümlaut", "%2F"])
def test_a_threads_messages_are_read_back_whatever_the_thread_id_holds(alice, thread_id):
    api = api_for(alice)
    api.start_run(**{**START, "thread_id": thread_id})
    assert [m.content for m in api.messages(thread_id)] == [QUESTION["question"]]


BAD_BODIES = [
    ("{not json", 400, "invalid_json", None),
    ("[]", 422, "invalid_request", "body"),
    ({**BODY, "workflow": "no_such_workflow"}, 422, "unknown_workflow", "workflow"),
    ({**BODY, "surprise": 1}, 422, "invalid_request", "surprise"),
    ({**BODY, "thread_id": 5}, 422, "invalid_request", "thread_id"),
    # A thread id is refused with the engine's code, as on the CLI: blank, NUL or long.
    ({**BODY, "thread_id": ""}, 422, "invalid_thread", "thread_id"),
    ({**BODY, "input": "text"}, 422, "invalid_input", "input"),
    ({**BODY, "input": {}}, 422, "invalid_input", "input.question"),
    ({**BODY, "budget": {"model_calls": -1}}, 422, "invalid_budget", "budget.model_calls"),
    ({**BODY, "budget": {"cost_usd": "-0.5"}}, 422, "invalid_budget", "budget.cost_usd"),
    ({**BODY, "budget": {"model_calls": "5"}}, 422, "invalid_budget", "budget.model_calls"),
    ({**BODY, "budget": {"tokens": -5}}, 422, "invalid_budget", "budget.tokens"),
    ({**BODY, "budget": {"calories": 5}}, 422, "invalid_budget", "budget.calories"),
    ({**BODY, "budget": [5]}, 422, "invalid_budget", "budget"),
    ({"workflow": "room_temperature"}, 422, "invalid_request", "thread_id"),
    (
        '{"workflow": "room_temperature", "thread_id": "t\\u0000", "input": {}}',
        422,
        "invalid_thread",
        "thread_id",
    ),
]


@pytest.mark.parametrize(("body", "status", "code", "field"), BAD_BODIES)
def test_it_refuses_bad_input_and_creates_nothing(alice, body, status, code, field):
    response = post(client_for(alice), "/api/v1/runs", body, HTTP_IDEMPOTENCY_KEY="bad")
    assert response.status_code == status, response.content
    payload = response.json()
    assert payload["code"] == code
    assert set(payload) == {"code", "message", "errors"}
    if field:
        assert field in payload["errors"], payload
    assert (Run.objects.count(), Thread.objects.count(), Message.objects.count()) == (0, 0, 0)


def test_it_refuses_a_bad_idempotency_key(alice):
    response = post(client_for(alice), "/api/v1/runs", BODY, HTTP_IDEMPOTENCY_KEY="x" * 201)
    assert response.status_code == 422
    assert "Idempotency-Key" in response.json()["errors"]
    assert Run.objects.count() == 0


def test_it_refuses_a_body_over_the_limit_with_413(alice, settings):
    settings.AGENTOPS_API_MAX_BODY_BYTES = 2048
    body = {**BODY, "input": {"question": "x" * 4000}}
    response = post(client_for(alice), "/api/v1/runs", body)
    assert response.status_code == 413
    assert response.json()["code"] == "body_too_large"
    assert Run.objects.count() == 0


def test_it_throttles_run_creation_per_token(alice, bob, settings):
    settings.AGENTOPS_API_CREATE_LIMIT = 2
    settings.AGENTOPS_API_CREATE_PERIOD = 3600
    client = client_for(alice)
    statuses = [
        post(client, "/api/v1/runs", BODY, HTTP_IDEMPOTENCY_KEY=f"k{i}").status_code
        for i in range(3)
    ]
    assert statuses == [201, 201, 429]
    refused = post(client, "/api/v1/runs", BODY, HTTP_IDEMPOTENCY_KEY="k9")
    assert refused.json()["code"] == "throttled" and int(refused["Retry-After"]) >= 1
    # A retry of a request that already created its run is not throttled.
    assert post(client, "/api/v1/runs", BODY, HTTP_IDEMPOTENCY_KEY="k0").status_code == 200
    assert post(client_for(bob), "/api/v1/runs", BODY).status_code == 201
    assert Run.objects.filter(owner=alice).count() == 2


def other_owner_requests(run, approval):
    base = f"/api/v1/runs/{run.pk}"
    return [
        ("get", base, None),
        ("get", f"{base}/events", None),
        ("get", f"{base}/stream", None),
        ("get", f"{base}/checkpoints", None),
        ("get", f"{base}/resume-preview?checkpoint=start", None),
        ("get", f"{base}/approvals", None),
        ("post", f"{base}/cancel", {"reason": "not mine"}),
        ("post", f"{base}/resume", {"checkpoint": "start", "reason": "not mine"}),
        ("post", f"{base}/steps/plan/resolve", {"outcome": "done", "evidence": "looked"}),
        ("post", f"/api/v1/approvals/{approval.pk}/decide", {"decision": "approve"}),
        ("get", f"/api/v1/threads/{run.thread.thread_id}/messages", None),
    ]


# Committed data: the stream view reads in a worker thread with its own connection.
@pytest.mark.django_db(transaction=True)
def test_it_answers_404_for_another_owners_run_on_every_endpoint(alice, bobs_run):
    run, approval = bobs_run
    client = client_for(alice)
    for method, path, body in other_owner_requests(run, approval):
        response = client.get(path) if method == "get" else act(client, path, body, run)
        assert response.status_code == 404, (path, response.content)
        assert response.json()["code"] == "not_found"
    assert client.get("/api/v1/runs").json()["count"] == 0
    assert client.get("/api/v1/approvals").json() == []
    assert Run.objects.get(pk=run.pk).status == "PENDING"
    assert Approval.objects.get(pk=approval.pk).status == "PENDING"


def test_it_lets_the_owner_and_staff_viewers_read_the_run(bob, bobs_run):
    run, approval = bobs_run
    assert api_for(bob).get_run(str(run.pk)).id == str(run.pk)
    assert [a.id for a in api_for(bob).approvals()] == [approval.pk]
    view = Permission.objects.get(content_type__app_label="runs", codename="view_run")
    viewer = User.objects.create_user("vic")
    viewer.user_permissions.add(view)
    with pytest.raises(ApiError) as hidden:
        api_for(viewer).get_run(str(run.pk))
    assert hidden.value.status == 404
    staff = User.objects.create_user("sam", is_staff=True)
    staff.user_permissions.add(view)
    staff_api = api_for(staff)
    assert staff_api.get_run(str(run.pk)).status == "PENDING"
    # Seeing is not acting: without runs.operate_run a staff viewer may not cancel.
    with pytest.raises(ApiError) as refused:
        staff_api.cancel(str(run.pk), reason="x")
    assert (refused.value.status, refused.value.code) == (403, "permission_denied")


def test_it_creates_lists_and_revokes_tokens_with_the_command(alice):
    out = StringIO()
    call_command("api_token", "create", "alice", "--name", "laptop", stdout=out)
    raw = out.getvalue().strip()
    token = ApiToken.objects.get(user=alice)
    assert raw.startswith("ao_") and raw not in (token.token_hash, token.prefix)
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert token.last_used_at is None
    assert client.get("/api/v1/runs").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None
    listing = StringIO()
    call_command("api_token", "list", "alice", stdout=listing)
    assert token.prefix in listing.getvalue() and raw not in listing.getvalue()
    call_command("api_token", "revoke", token.prefix, stdout=StringIO())
    assert client.get("/api/v1/runs").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_it_lets_the_owner_act_through_the_engine(bob, bobs_run):
    run, approval = bobs_run
    api, run_id = api_for(bob), str(run.pk)
    assert api.resume_preview(run_id, "start")["steps_to_rerun"][0] == "plan"
    with pytest.raises(ApiError) as unknown:
        api.resume_preview(run_id, "nope")
    assert (unknown.value.status, unknown.value.code) == (422, "unknown_checkpoint")
    # Deciding needs the approver permission, whoever owns the run.
    [pending] = api.run_approvals(run_id)
    assert pending.id == approval.pk and pending.status == "PENDING"
    with pytest.raises(ApiError) as refused:
        api.approve(pending)
    assert (refused.value.status, refused.value.code) == (403, "permission_denied")
    with pytest.raises(ApiError) as not_unknown:
        api.resolve(run_id, "plan", outcome="done", evidence="checked")
    assert 400 <= not_unknown.value.status < 500 and not_unknown.value.code
    cancelled = api.cancel(run_id, reason="changed my mind")
    assert cancelled.status in ("CANCEL_REQUESTED", "CANCELLED")
    events = api.events(run_id).items
    assert any(e.actor == "user:bob" and e.type.startswith("run.cancel") for e in events)
    with pytest.raises(ApiError) as again:
        api.resume(run_id, checkpoint="start", reason="r")
    assert again.value.status in (409, 422) and again.value.code


def test_it_manages_tokens_in_the_console(alice, bob):
    browser = Client()
    browser.force_login(alice)
    page = browser.post("/tokens/", {"name": "laptop"})
    assert page.status_code == 200
    raw = page.context["created"]
    assert raw in page.content.decode()
    assert browser.get("/tokens/").content.decode().count(raw) == 0  # shown once
    token = ApiToken.objects.get(user=alice, name="laptop")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/runs").status_code == 200
    bobs = Client()
    bobs.force_login(bob)
    assert bobs.post(f"/tokens/{token.pk}/revoke/").status_code == 404
    assert browser.post(f"/tokens/{token.pk}/revoke/").status_code == 302
    assert api.get("/api/v1/runs").status_code == 401
    assert Client().get("/tokens/").status_code == 302  # login first
