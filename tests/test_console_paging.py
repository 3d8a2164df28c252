"""Walking every page of the runs list, console and API, shows each run exactly once,
whatever the sort order (ties are broken by primary key). 400 runs share three
statuses, two workflows and one timestamp, so only the tie-breaker decides the order."""

import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apitokens.services import create_token
from runs.console.filters import RunFilter
from runs.console.paging import PAGE_SIZE
from runs.models import Run, Thread
from runs.states import RunStatus
from tests.support.in_process import actors, clients, device_dir, fast_passwords  # noqa: F401

pytestmark = pytest.mark.django_db

RUNS = 400
AT = datetime(2026, 1, 1, tzinfo=UTC)
ROW = re.compile(r'href="/runs/([0-9a-f-]{36})/"')
#: Every sort option of the runs list, both directions, and none.
SORTS = [""] + [
    f"{sign}{name}" for name, _ in RunFilter.base_filters["o"].param_map.items() for sign in "-+"
]


@pytest.fixture
def many_runs(actors):  # noqa: F811
    owner = actors["bob"]
    thread = Thread.objects.create(owner=owner, thread_id="paging")
    statuses = [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.PENDING]
    Run.objects.bulk_create(
        Run(
            thread=thread,
            owner=owner,
            workflow=("room_temperature", "chat")[i % 2],
            workflow_version=1,
            status=statuses[i % 3],
            created_at=AT,
            updated_at=AT,
            last_event_at=AT,
        )
        for i in range(RUNS)
    )
    return {str(pk) for pk in Run.objects.values_list("pk", flat=True)}


@pytest.mark.parametrize("sort", SORTS)
def test_it_shows_every_run_once_across_the_console_pages(clients, many_runs, sort):  # noqa: F811
    seen: list[str] = []
    for page in range(1, RUNS // PAGE_SIZE + 1):
        query = {"page": page, **({"o": sort.lstrip("+")} if sort else {})}
        response = clients["alice"].get("/runs/", query)
        assert response.status_code == 200
        seen += ROW.findall(response.content.decode())
    assert len(seen) == len(set(seen)) == RUNS
    assert set(seen) == many_runs


def test_it_shows_every_run_once_across_the_api_pages(many_runs):
    staff = User.objects.create_superuser("root", password="pw-for-tests")
    _, raw = create_token(staff)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    seen: list[str] = []
    for offset in range(0, RUNS, 70):
        response = client.get("/api/v1/runs", {"limit": 70, "offset": offset})
        assert response.status_code == 200
        seen += [item["id"] for item in response.json()["items"]]
    assert len(seen) == len(set(seen)) == RUNS
