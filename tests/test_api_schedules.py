"""The schedules API: staff operators create, pause, resume, trigger and delete; viewers
read; anyone else gets 403; bad timings are 422 and nothing is written."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agentops_client import ApiError
from apitokens.services import create_token
from runs.console.roles import setup_roles
from runs.models import Run, Schedule, ScheduleTick
from tests.support.api_client import in_process_client

pytestmark = pytest.mark.django_db(transaction=True)


def client_for(user) -> Client:
    _, raw = create_token(user)
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


@pytest.fixture
def api():
    groups = setup_roles()
    desk = User.objects.create_user("desk", is_staff=True)
    desk.groups.add(groups["operator"], groups["viewer"])
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.groups.add(groups["viewer"])
    plain = User.objects.create_user("plain")
    return {"desk": client_for(desk), "viewer": client_for(viewer), "plain": client_for(plain)}


@pytest.fixture
def clients(api):
    """``agentops_client.Client`` as ``desk`` (operator) and ``viewer``, in-process."""
    users = User.objects.filter(username__in=["desk", "viewer"])
    return {u.username: in_process_client(create_token(u)[1]) for u in users}


def post(client, path, body=None, **headers):
    return client.post(path, json.dumps(body or {}), content_type="application/json", **headers)


def test_it_creates_lists_pauses_triggers_and_deletes(api, clients):
    body = {
        "name": "weekly",
        "workflow": "bench_noop",
        "cron": "0 9 * * 1",
        "timezone": "Asia/Tokyo",
    }
    for bad, field in (
        ({**body, "cron": "nope"}, "cron"),
        ({**body, "timezone": "Mars/Base"}, "timezone"),
        ({**body, "every": 5}, "cron"),
    ):
        refused = post(api["desk"], "/api/v1/schedules", bad)
        assert refused.status_code == 422 and field in refused.json()["errors"], refused.json()
    assert post(api["viewer"], "/api/v1/schedules", body).status_code == 403
    assert not Schedule.objects.exists()

    desk, viewer = clients["desk"], clients["viewer"]
    created = post(api["desk"], "/api/v1/schedules", body)
    assert created.status_code == 201
    assert created.json()["timing"] == "0 9 * * 1 (Asia/Tokyo)"
    with pytest.raises(ApiError) as exists:
        desk.create_schedule("weekly", "bench_noop", cron="0 9 * * 1", timezone="Asia/Tokyo")
    assert exists.value.code == "schedule_exists"
    (listed,) = viewer.schedules()
    assert len(listed.next_fire_times) == 3
    assert api["plain"].get("/api/v1/schedules").status_code == 403

    assert desk.pause_schedule("weekly").paused is True
    first = desk.trigger_schedule("weekly", idempotency_key="t-1")
    again = desk.trigger_schedule("weekly", idempotency_key="t-1")
    assert first == again and first.outcome == "started" and again.replayed
    assert ScheduleTick.objects.count() == 1 and Run.objects.count() == 1
    assert desk.resume_schedule("weekly").paused is False
    desk.delete_schedule("weekly")
    with pytest.raises(ApiError) as missing:
        desk.pause_schedule("weekly")
    assert (missing.value.status, missing.value.code) == (404, "unknown_schedule")
    assert Run.objects.count() == 1


EVERY = {"name": "tick", "workflow": "bench_noop", "every": 60}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"every": 999999999999999999999999}, "every"),
        ({"every": 315_360_001}, "every"),
        ({"every": 0}, "every"),
        ({"every": "60"}, "every"),
        ({"every": 60.0}, "every"),
        ({"every": True}, "every"),
        ({"catchup_window": 10**30}, "catchup_window"),
        ({"catchup_window": "60"}, "catchup_window"),
        ({"name": "a/b?c"}, "name"),
        ({"name": "ctl\x01name"}, "name"),
        ({"name": "new\nline"}, "name"),
        ({"name": " "}, "name"),
        ({"every": None, "cron": "0 9 * * 1", "timezone": ""}, "timezone"),
        ({"workflow": "order_followup", "input": {"order": "o", "delay_s": 10**23}}, "delay_s"),
    ],
)
def test_it_refuses_every_bad_schedule_field_with_one_rule_and_writes_nothing(api, change, field):
    refused = post(api["desk"], "/api/v1/schedules", {**EVERY, **change})
    assert refused.status_code == 422, refused.content
    # The engine's rule answers, also for a wrong JSON type ("60" is text, not seconds).
    assert refused.json()["code"] == "invalid_input", refused.content
    assert any(field in key for key in refused.json()["errors"]), refused.json()
    assert Schedule.objects.count() == 0


def test_a_schedule_named_by_the_rule_is_reachable_by_the_api(clients):
    clients["desk"].create_schedule("night.v2_a-b", "bench_noop", every=60)
    assert clients["desk"].pause_schedule("night.v2_a-b").paused
    assert Schedule.objects.get(name="night.v2_a-b").paused
