"""The run page of a map step with 10,000 branches: the branches are counted by state
in one grouped query, the steps section shows one page of them (a branch named with its
position), and the page makes as many queries as for a fan-out of three; the timeline
draws the map step's wait for its branches, ended by the join. A resume confirmed while
a branch runs says it waits for it, and is made once the branch stopped."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.console.access import form_version
from runs.console.charts import run_timeline
from runs.engine.control.lifecycle import settle_pause, start_run
from runs.engine.state.clock import db_now
from runs.models import Event, Run, Step
from runs.states import RunStatus, StepStatus
from runs.views.run_detail import SECTION_SIZE
from tests.support.fanout import fanned_out_run
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_in_process
from tests.support.states import arrange

pytestmark = pytest.mark.django_db


def _fanned_out_run(owner, branches: int):
    """A fanned-out run of ``owner``'s: every fourth branch FAILED, the rest SUCCEEDED
    but the last one RUNNING."""

    def status_of(i: int) -> str:
        if i == branches - 1:
            return StepStatus.RUNNING
        return StepStatus.FAILED if i % 4 == 3 else StepStatus.SUCCEEDED

    return fanned_out_run(branches, status_of, owner=owner)[0]


def _page(client, run):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("console:run", args=[run.pk]))
    assert response.status_code == 200
    return response.content.decode(), len(queries)


def test_it_counts_ten_thousand_branches_with_the_queries_of_three(clients, actors):  # noqa: F405
    small = _fanned_out_run(actors["bob"], 3)  # noqa: F405
    big = _fanned_out_run(actors["bob"], 10_000)  # noqa: F405

    _, few = _page(clients["alice"], small)  # noqa: F405
    html, many = _page(clients["alice"], big)  # noqa: F405

    assert many == few
    row = html.split('id="branches"')[1].split("</table>")[0]
    assert "<td>10000</td>" in row
    assert "SUCCEEDED 7500" in row and "FAILED 2499" in row and "RUNNING 1" in row
    steps = html.split('id="steps"')[1].split("</table>")[0]
    assert steps.count('class="step-row"') == SECTION_SIZE
    assert "fetch[9999]" in steps
    # The timeline draws the branches as one row with counts after their map step.
    labels = [row["label"] for row in run_timeline(big, db_now()).rows]
    assert labels == [
        f"{big.steps.get(branch_of=None).seq}. fetch",
        "  fetch: 10000 branches: FAILED 2499, RUNNING 1, SUCCEEDED 7500",
    ]


@pytest.mark.django_db(transaction=True)
def test_the_timeline_shows_the_map_steps_wait_for_its_branches_until_the_join(clients):  # noqa: F405
    run = start_run("fanout_demo", thread_id="fan-timeline", input={"items": 3, "delay_s": 0})
    while run_worker_in_process():
        pass
    run.refresh_from_db()
    assert run.status == "SUCCEEDED"

    timeline = run_timeline(run, db_now())
    waits = [row[:2] for row in timeline.table.rows if row[1].startswith("wait")]
    assert waits == [["fetch", "wait: branches (joined)"]]
    branches = [row for row in timeline.table.rows if "branches:" in row[1]]
    assert [row[:2] + row[5:] for row in branches] == [
        ["fetch", "3 branches: SUCCEEDED 3", "succeeded"]
    ]
    html, _ = _page(clients["alice"], run)  # noqa: F405
    assert "SUCCEEDED 3" in html.split('id="branches"')[1].split("</table>")[0]


def test_a_resume_while_a_branch_runs_is_requested_then_made_once_it_stopped(clients, actors):  # noqa: F405
    run = _fanned_out_run(actors["bob"], 3)  # noqa: F405
    arrange(Run.objects.filter(pk=run.pk), status=RunStatus.RUNNING)
    running = Step.objects.get(run=run, status=StepStatus.RUNNING)
    arrange(Step.objects.filter(pk=running.pk), attempt=1, owner="w1", lease_until=db_now())
    url = reverse("console:resume_preview", args=[run.pk])
    form = {"checkpoint": "start", "reason": "fan out afresh"}
    previewed = clients["bob"].get(url, {"checkpoint": "start"}).context["previewed"]  # noqa: F405
    run.refresh_from_db()
    response = clients["bob"].post(  # noqa: F405
        url, {**form, "previewed": previewed, "run_version": form_version(run)}, follow=True
    )

    assert response.status_code == 200
    page = response.content.decode()
    waiting = "pause requested, waiting for the running steps (1 running)"
    assert f"resume requested; {waiting}" in page
    assert f'id="pause-progress">{waiting}' in page
    run.refresh_from_db()
    assert (run.generation, run.pause_request["resume"]["checkpoint"]) == (1, "start")

    # Its lease gone (a dead worker), the next settle makes the resume as its requester.
    assert settle_pause(run.pk, actor="sweeper")
    run.refresh_from_db()
    assert (run.generation, run.pause_requested_at, run.pause_request) == (2, None, {})
    assert Step.objects.get(pk=running.pk).status == StepStatus.SUPERSEDED
    resumed = Event.objects.get(run=run, type="run.resumed_from_checkpoint")
    assert (resumed.actor, resumed.payload["reason"]) == ("user:bob", "fan out afresh")
    assert not Event.objects.filter(run=run, type="run.paused").exists()
