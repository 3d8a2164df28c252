"""State-changing API actions: the If-Match precondition, Idempotency-Key replays, the
ETag they answer with, and the OpenAPI schema documenting both headers."""

import json
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apitokens.services import create_token
from runs.api.schemas import BudgetRaiseIn
from runs.console.roles import setup_roles
from runs.engine.control.preconditions import run_etag
from runs.models import ActionRequest, Event, Run
from tests.support.api_client import in_process_client
from tests.support.in_process import *  # noqa: F403

pytestmark = pytest.mark.django_db(transaction=True)

ACTIONS = [
    "/api/v1/runs/{run_id}/cancel",
    "/api/v1/runs/{run_id}/resume",
    "/api/v1/runs/{run_id}/retry",
    "/api/v1/runs/{run_id}/budget",
    "/api/v1/runs/{run_id}/steps/{step_name}/resolve",
    "/api/v1/approvals/{approval_id}/decide",
]


@pytest.fixture
def actors(db):
    """The demo fixture's owners plus ``desk``, a staff operator and approver."""
    groups = setup_roles()
    desk = User.objects.create_user("desk", is_staff=True)
    desk.groups.add(groups["operator"], groups["approver"], groups["viewer"])
    return {"desk": desk}


@pytest.fixture
def api(actors):
    _, raw = create_token(actors["desk"])
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


@pytest.fixture
def desk_client(actors):
    """``agentops_client.Client`` as ``desk``, served in-process."""
    _, raw = create_token(actors["desk"])
    return in_process_client(raw)


def post(client, path, body, **headers):
    return client.post(path, json.dumps(body), content_type="application/json", **headers)


def budget_events(run):
    return Event.objects.filter(run=run, type="budget.raised").count()


def test_it_answers_the_run_with_its_etag(api, demo):
    run = demo["budget"]
    response = api.get(f"/api/v1/runs/{run.pk}")
    assert response.headers["ETag"] == response.json()["etag"] == run_etag(run)


def test_it_acts_with_the_current_etag_and_answers_the_new_one(api, demo):
    run = demo["budget"]
    etag = run_etag(run)
    path = f"/api/v1/runs/{run.pk}/budget"
    response = post(api, path, {"reason": "pay", "add_model_calls": 2}, HTTP_IF_MATCH=etag)
    assert response.status_code == 200, response.content
    run.refresh_from_db()
    assert response.headers["ETag"] == response.json()["etag"] == run_etag(run) != etag
    assert budget_events(run) == 1
    # The old tag is stale now: nothing happens.
    stale = post(api, path, {"reason": "again", "add_model_calls": 2}, HTTP_IF_MATCH=etag)
    assert (stale.status_code, stale.json()["code"]) == (409, "run_changed")
    assert budget_events(run) == 1


def test_it_needs_a_well_formed_if_match(api, demo):
    run = demo["budget"]
    path = f"/api/v1/runs/{run.pk}/budget"
    body = {"reason": "pay", "add_model_calls": 2}
    missing = post(api, path, body)
    assert missing.status_code == 422 and "If-Match" in missing.json()["errors"]
    for bad in ("*", '"1.2"', '"1.1.5d41402a", "2.1.5d41402a"', "x" * 300):
        response = post(api, path, body, HTTP_IF_MATCH=bad)
        assert (response.status_code, response.json()["code"]) == (422, "invalid_if_match")
    # Weak and unquoted forms of the right tag are the same tag.
    tag = run_etag(run).strip('"')
    assert post(api, path, body, HTTP_IF_MATCH=f'W/"{tag}"').status_code == 200
    assert budget_events(run) == 1


def test_it_replays_the_first_response_for_one_idempotency_key(api, demo):
    run = demo["budget"]
    etag = run_etag(run)
    path = f"/api/v1/runs/{run.pk}/budget"
    body = {"reason": "pay once", "add_tool_calls": 1}
    first = post(api, path, body, HTTP_IF_MATCH=etag, HTTP_IDEMPOTENCY_KEY="k1")
    again = post(api, path, body, HTTP_IF_MATCH=etag, HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["ETag"] == first.headers["ETag"]
    assert budget_events(run) == 1
    other = post(
        api, path, {**body, "add_tool_calls": 2}, HTTP_IF_MATCH=etag, HTTP_IDEMPOTENCY_KEY="k1"
    )
    assert (other.status_code, other.json()["code"]) == (422, "idempotency_key_reused")
    # A refusal is the first response too: a retry with its key gets it again.
    stale = post(api, path, body, HTTP_IF_MATCH=etag, HTTP_IDEMPOTENCY_KEY="k2")
    replayed = post(api, path, body, HTTP_IF_MATCH=etag, HTTP_IDEMPOTENCY_KEY="k2")
    assert stale.status_code == replayed.status_code == 409
    assert replayed.content == stale.content and replayed.headers["Idempotent-Replayed"] == "true"
    assert ActionRequest.objects.filter(key__in=["k1", "k2"]).count() == 2
    bad_key = post(api, path, body, HTTP_IF_MATCH=etag, HTTP_IDEMPOTENCY_KEY="a b")
    assert (bad_key.status_code, bad_key.json()["code"]) == (422, "invalid_idempotency_key")


def test_it_replays_the_first_response_byte_for_byte(api, demo):
    run = demo["budget"]
    # A time with fewer than 1000 microseconds: the JSON encoder cuts it to ".000Z", and
    # that string parsed and rendered again would come out as "Z".
    odd = datetime(2026, 1, 2, 3, 4, 5, 500, tzinfo=UTC)
    Run.objects.filter(pk=run.pk).update(created_at=odd, started_at=odd)
    Event.objects.filter(run=run).update(created_at=odd)
    path = f"/api/v1/runs/{run.pk}/budget"
    body = {"reason": "pay once", "add_tool_calls": 1}
    headers = {"HTTP_IF_MATCH": run_etag(run), "HTTP_IDEMPOTENCY_KEY": "k1"}
    first = post(api, path, body, **headers)
    again = post(api, path, body, **headers)
    assert first.status_code == again.status_code == 200
    assert '"2026-01-02T03:04:05.000Z"' in first.content.decode()
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"
    assert budget_events(run) == 1


def test_it_retries_a_paused_runs_failed_step(desk_client, demo):
    run = demo["retries_exhausted"]
    retried = desk_client.retry(str(run.pk), reason="dependency is back", if_match=run_etag(run))
    assert retried.status == "RUNNING"
    [event] = Event.objects.filter(run=run, type="step.retry_requested")
    assert event.actor == "user:desk" and event.payload["reason"] == "dependency is back"


def test_it_documents_if_match_and_idempotency_key_on_every_action():
    schema = Client().get("/api/v1/openapi.json").json()
    for path in ACTIONS:
        operation = schema["paths"][path]["post"]
        headers = {p["name"]: p for p in operation["parameters"] if p["in"] == "header"}
        assert headers["If-Match"]["required"] is True, path
        assert "Idempotency-Key" in headers, path
        assert "409" in operation["responses"], path


def test_it_documents_the_etag_header_everywhere_it_is_sent():
    schema = Client().get("/api/v1/openapi.json").json()
    sent = [(path, "post", "200") for path in ACTIONS]
    sent += [
        ("/api/v1/runs/{run_id}/replay", "post", "200"),
        ("/api/v1/runs/{run_id}", "get", "200"),
    ]
    sent += [("/api/v1/runs", "post", "201"), ("/api/v1/runs", "post", "200")]
    for path, method, status in sent:
        response = schema["paths"][path][method]["responses"][status]
        assert response["headers"]["ETag"]["schema"] == {"type": "string"}, (path, status)
        # Merged into the response ninja documents, not a second entry under that code.
        assert response["description"] and response["content"], (path, status)


def test_it_answers_a_new_run_with_its_etag_header(api):
    body = {"workflow": "room_temperature", "thread_id": "t-etag", "input": {"question": "?"}}
    created = post(api, "/api/v1/runs", body)
    assert created.status_code == 201, created.content
    run = Run.objects.get(pk=created.json()["id"])
    assert created.headers["ETag"] == created.json()["etag"] == run_etag(run)
    first = post(api, "/api/v1/runs", {**body, "thread_id": "t-key"}, HTTP_IDEMPOTENCY_KEY="c1")
    again = post(api, "/api/v1/runs", {**body, "thread_id": "t-key"}, HTTP_IDEMPOTENCY_KEY="c1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.headers["ETag"] == first.headers["ETag"] == first.json()["etag"]


def test_budget_amounts_have_the_engines_bounds_and_limits(api, desk_client, demo):
    """The API takes what the engine takes (``MAX_AMOUNTS``), no more and no less, and
    refuses like the CLI and the console: an addition to a limit the run does not have
    (``limit_not_set``) or one that would pass the maximum changes nothing."""
    run = demo["budget"]
    path = f"/api/v1/runs/{run.pk}/budget"
    limits = dict(run.budget)

    def raise_by(body):
        return post(api, path, {"reason": "r", **body}, HTTP_IF_MATCH=run_etag(run))

    over = raise_by({"add_cost_usd": "1000000.000001"})
    assert (over.status_code, over.json()["code"]) == (422, "invalid_budget")
    unset = raise_by({"add_tokens": 5})
    assert (unset.status_code, unset.json()["code"]) == (409, "limit_not_set")
    assert list(unset.json()["errors"]) == ["add_tokens"]
    past_max = raise_by({"add_model_calls": 1_000_000})
    assert (past_max.status_code, past_max.json()["code"]) == (422, "invalid_budget")
    nothing = raise_by({"add_model_calls": 0})
    assert (nothing.status_code, nothing.json()["code"]) == (422, "invalid_budget")
    # The errors name the body's own fields, not a "budget" it has not got.
    fields = set(BudgetRaiseIn.model_fields) - {"reason"}
    assert set(nothing.json()["errors"]) == fields
    run.refresh_from_db()
    assert run.budget == limits and budget_events(run) == 0
    created = desk_client.start_run(
        "room_temperature",
        thread_id="t-max",
        input={"question": "How warm is it?"},
        budget={"cost_usd": "1000000", "tokens": 10**12},
    )
    assert created.budget.limits == {"cost_usd": "1000000", "tokens": 10**12}
