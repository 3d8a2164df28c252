"""The replay endpoints: one run (If-Match, Idempotency-Key) and in bulk
(Idempotency-Key), operators only, with the preview listing reused side effects."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apitokens.services import create_token
from runs.engine.control import lifecycle
from runs.engine.control.preconditions import run_etag
from runs.models import Event, Run
from tests.support.api_client import in_process_client
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import failed_runs

pytestmark = pytest.mark.django_db(transaction=True)


def token_client(user) -> Client:
    _, raw = create_token(user)
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


@pytest.fixture
def api(actors):
    """Token clients: ``bob`` the operator (staff), ``viewer`` a staff viewer."""
    viewer = User.objects.create_user("vera", is_staff=True)
    viewer.groups.add(actors["alice"].groups.get())
    return {"bob": token_client(actors["bob"]), "viewer": token_client(viewer)}


@pytest.fixture
def bob_client(actors):
    """``agentops_client.Client`` as ``bob`` the operator, served in-process."""
    _, raw = create_token(actors["bob"])
    return in_process_client(raw)


def post(client, path, body, **headers):
    return client.post(path, json.dumps(body), content_type="application/json", **headers)


def test_it_replays_one_run_and_links_both_ways(api, bob_client):
    [run] = failed_runs(1, "A")
    answer = bob_client.replay(
        str(run.pk), reason="lamp fixed", if_match=run_etag(run), idempotency_key="k-1"
    )
    assert answer.replay is not None and not answer.replayed
    new_id = answer.replay.id
    assert answer.preview["checkpoint"]["name"] == "start"
    assert answer.replay.replay_of == str(run.pk)
    assert answer.replay.replay_checkpoint == "start"
    assert bob_client.get_run(str(run.pk)).replays == [new_id]
    assert [r.id for r in bob_client.list_runs(is_replay=True).items] == [new_id]
    assert [r.id for r in bob_client.list_runs(was_replayed=True).items] == [str(run.pk)]
    # The same request again: the first answer, no second run.
    again = bob_client.replay(
        str(run.pk), reason="lamp fixed", if_match=run_etag(run), idempotency_key="k-1"
    )
    assert again.replayed and again.replay is not None and again.replay.id == new_id
    assert run.replays.count() == 1
    # Without the key it is a second replay, refused unless asked for.
    path = f"/api/v1/runs/{run.pk}/replay"
    second = post(api["bob"], path, {"reason": "x"}, HTTP_IF_MATCH=run_etag(run))
    assert (second.status_code, second.json()["code"]) == (409, "already_replayed")


def test_it_previews_without_changing_anything(bob_client):
    [run] = failed_runs(1, "A")
    before = (Run.objects.count(), Event.objects.count())
    answer = bob_client.replay(str(run.pk), reason="look", dry_run=True, if_match=run_etag(run))
    assert answer.dry_run and answer.replay is None
    assert answer.preview["steps_to_run"][0] == "read_lamp"
    assert (Run.objects.count(), Event.objects.count()) == before


def test_a_viewer_gets_403_and_nothing_is_replayed(api):
    [run] = failed_runs(1, "A")
    one = post(
        api["viewer"],
        f"/api/v1/runs/{run.pk}/replay",
        {"reason": "x"},
        HTTP_IF_MATCH=run_etag(run),
    )
    assert (one.status_code, one.json()["code"]) == (403, "permission_denied")
    bulk = post(api["viewer"], "/api/v1/replays", {"reason": "x"})
    assert (bulk.status_code, bulk.json()["code"]) == (403, "permission_denied")
    assert not Run.objects.filter(replay_of__isnull=False).exists()


def test_it_refuses_bad_requests_with_codes(api):
    [run] = failed_runs(1, "A")
    path = f"/api/v1/runs/{run.pk}/replay"
    etag = run_etag(run)
    missing = post(api["bob"], path, {}, HTTP_IF_MATCH=etag)
    assert missing.status_code == 422 and "reason" in json.dumps(missing.json()["errors"])
    unknown = post(api["bob"], path, {"reason": "x", "checkpoint": "after:no"}, HTTP_IF_MATCH=etag)
    assert (unknown.status_code, unknown.json()["code"]) == (422, "unknown_checkpoint")
    live = lifecycle.start_run("dim_lights", thread_id="live", input={"request": "dim it"})
    busy = post(
        api["bob"], f"/api/v1/runs/{live.pk}/replay", {"reason": "x"}, HTTP_IF_MATCH=run_etag(live)
    )
    assert (busy.status_code, busy.json()["code"]) == (409, "run_not_finished")
    rate = post(api["bob"], "/api/v1/replays", {"reason": "x", "rate": 0})
    assert rate.status_code == 422
    assert not Run.objects.filter(replay_of__isnull=False).exists()


def test_a_bulk_replay_names_bad_filters_and_non_finite_rates(api):
    failed_runs(1, "A")
    # An unknown workflow is answered with the registered names; a blank one breaks the
    # name rule.
    for workflow, code, said in (
        ("nope", "unknown_workflow", "dim_lights"),
        ("", "invalid_input", "workflow name must be"),
    ):
        bad = post(api["bob"], "/api/v1/replays", {"reason": "x", "workflow": workflow})
        assert (bad.status_code, bad.json()["code"]) == (422, code), bad.content
        assert said in bad.json()["message"]
        assert "workflow" in bad.json()["errors"]
    status = post(api["bob"], "/api/v1/replays", {"reason": "x", "status": "RUNNING"})
    assert status.status_code == 422
    since = post(api["bob"], "/api/v1/replays", {"reason": "x", "since": "yesterday"})
    assert since.status_code == 422
    # The engine's rate rule answers, as on the console: text ("5" too) is no rate.
    for rate in ("NaN", "Infinity", "-Infinity", float("nan"), float("inf"), "5", True):
        bad = post(api["bob"], "/api/v1/replays", {"reason": "x", "rate": rate})
        assert (bad.status_code, bad.json()["code"]) == (422, "invalid_rate"), bad.content
        assert list(bad.json()["errors"]) == ["rate"], bad.content
    assert not Run.objects.filter(replay_of__isnull=False).exists()
    ok = post(api["bob"], "/api/v1/replays", {"reason": "x", "workflow": "dim_lights"})
    assert ok.status_code == 200 and len(ok.json()["created"]) == 1


def test_a_repeated_bulk_request_with_its_key_creates_none(api):
    runs = failed_runs(5, "A")
    body = {"reason": "lamp firmware fixed", "workflow": "dim_lights", "rate": 100}
    first = post(api["bob"], "/api/v1/replays", body, HTTP_IDEMPOTENCY_KEY="bulk-1")
    assert first.status_code == 200, first.content
    assert len(first.json()["created"]) == 5
    assert Run.objects.filter(replay_of__in=runs).count() == 5
    repeat = post(api["bob"], "/api/v1/replays", body, HTTP_IDEMPOTENCY_KEY="bulk-1")
    assert repeat.status_code == 200 and repeat.headers["Idempotent-Replayed"] == "true"
    assert repeat.json() == first.json()
    assert Run.objects.filter(replay_of__isnull=False).count() == 5
    # A new request skips the runs replayed already.
    fresh = post(api["bob"], "/api/v1/replays", body, HTTP_IDEMPOTENCY_KEY="bulk-2")
    assert fresh.json()["created"] == []
    assert Run.objects.filter(replay_of__isnull=False).count() == 5


def test_the_schema_documents_both_headers():
    from runs.api.app import api as ninja_api

    paths = ninja_api.get_openapi_schema()["paths"]
    one = [p["name"] for p in paths["/api/v1/runs/{run_id}/replay"]["post"]["parameters"]]
    bulk = [p["name"] for p in paths["/api/v1/replays"]["post"]["parameters"]]
    assert {"If-Match", "Idempotency-Key"} <= set(one)
    assert "Idempotency-Key" in bulk
