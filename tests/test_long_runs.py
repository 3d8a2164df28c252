"""A run of many loop iterations stays readable: the API and the console page its
steps, attempts and checkpoints, and every iteration's checkpoint has its own name
(``after:think#7``) while ``after:think`` keeps meaning the newest."""

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apitokens.services import create_token
from runs.api.documents import RUN_STEPS_LIMIT
from runs.engine.control.rewind import find_checkpoint
from runs.models import Checkpoint, Event, Run, Step, Thread
from runs.states import RunStatus, StepStatus
from runs.views.run_detail import SECTION_SIZE
from tests.support.in_process import actors, clients, device_dir, fast_passwords  # noqa: F401

pytestmark = pytest.mark.django_db

ITERATIONS = 600


@pytest.fixture
def loop_run(actors):  # noqa: F811
    """A PAUSED ``think`` loop: ITERATIONS steps, each with a checkpoint and 2 events."""
    owner = actors["bob"]
    thread = Thread.objects.create(owner=owner, thread_id="loop")
    run = Run.objects.create(
        thread=thread,
        owner=owner,
        workflow="room_temperature",
        workflow_version=1,
        status=RunStatus.PAUSED,
        event_seq=2 * ITERATIONS,
    )
    steps = Step.objects.bulk_create(
        Step(run=run, name="think", seq=i, status=StepStatus.SUCCEEDED, attempt=1)
        for i in range(1, ITERATIONS + 1)
    )
    Checkpoint.objects.bulk_create(
        Checkpoint(run=run, step=s, name="after:think", state={"phase": "think", "i": s.seq})
        for s in steps
    )
    Event.objects.bulk_create(
        Event(run=run, step=s, seq=2 * s.seq - 1 + k, type=t, payload={"attempt": 1})
        for s in steps
        for k, t in enumerate(("step.started", "step.succeeded"))
    )
    return run


@pytest.fixture
def api(actors):  # noqa: F811
    _, raw = create_token(User.objects.get(username="bob"))
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def test_it_names_every_iterations_checkpoint_and_keeps_the_plain_name_for_the_newest(loop_run):
    assert find_checkpoint(loop_run, "after:think#7").step.seq == 7
    assert find_checkpoint(loop_run, "after:think").step.seq == ITERATIONS


def test_it_pages_steps_and_checkpoints_in_the_api(loop_run, api):
    document = api.get(f"/api/v1/runs/{loop_run.pk}").json()
    assert document["steps_total"] == ITERATIONS
    assert [s["seq"] for s in document["steps"]] == list(
        range(ITERATIONS - RUN_STEPS_LIMIT + 1, ITERATIONS + 1)
    )
    assert document["steps"][-1]["attempts"][0]["outcome"] == "step.succeeded"

    seqs, after = [], 0
    while after is not None:
        page = api.get(f"/api/v1/runs/{loop_run.pk}/steps", {"after_seq": after}).json()
        seqs += [s["seq"] for s in page["items"]]
        after = page["next_after_seq"]
    assert seqs == list(range(1, ITERATIONS + 1))

    names, url = [], f"/api/v1/runs/{loop_run.pk}/checkpoints?limit=250"
    while url:
        response = api.get(url)
        names += [c["name"] for c in response.json()]
        link = re.match(r'<([^>]+)>; rel="next"', response.get("Link", ""))
        url = link.group(1) if link else None
    assert names == [f"after:think#{i}" for i in range(1, ITERATIONS + 1)]


def test_it_pages_the_sections_of_the_console_run_page(loop_run, clients):  # noqa: F811
    page = clients["alice"].get(f"/runs/{loop_run.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('<tr class="step-row"') == SECTION_SIZE
    assert len(html) < 300_000  # 600 iterations: one page of each section, not all of them
    assert f"of {ITERATIONS}, newest first" in html
    assert f"after:think#{ITERATIONS}" in html and "after:think#1<" not in html
    oldest = clients["alice"].get(
        f"/runs/{loop_run.pk}/", {"steps": ITERATIONS // SECTION_SIZE, "checkpoints": 12}
    )
    assert "<td>1</td><td>think</td>" in oldest.content.decode()
    assert "after:think#1<" in oldest.content.decode()
