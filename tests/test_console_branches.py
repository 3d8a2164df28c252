"""The run page of a map step with 10,000 branches: the branches are counted by state
in one grouped query, the steps section shows one page of them (a branch named with its
position), and the page makes as many queries as for a fan-out of three; the timeline
draws the map step's wait for its branches, ended by the join."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.console.charts import run_timeline
from runs.engine.control.lifecycle import start_run
from runs.engine.state.clock import db_now
from runs.models import Step
from runs.states import StepStatus
from runs.views.run_detail import SECTION_SIZE
from tests.console_helpers import *  # noqa: F403 - fixtures
from tests.console_helpers import run_worker_in_process
from tests.support.states import arrange

pytestmark = pytest.mark.django_db


def _fanned_out_run(owner, branches: int):
    """A ``fanout_demo`` run whose ``fetch`` step fanned out into ``branches`` rows:
    every fourth FAILED, the rest SUCCEEDED but the last one RUNNING."""
    run = start_run(
        "fanout_demo",
        thread_id=f"fan-{branches}",
        input={"items": branches, "delay_s": 0},
        owner=owner,
    )
    parent = Step.objects.get(run=run)
    arrange(Step.objects.filter(pk=parent.pk), status=StepStatus.WAITING)
    Step.objects.bulk_create(
        [
            Step(
                run=run,
                name="fetch",
                seq=2 + i,
                branch_of=parent,
                position=i,
                input={"item": i + 1},
                status=(
                    StepStatus.RUNNING
                    if i == branches - 1
                    else StepStatus.FAILED
                    if i % 4 == 3
                    else StepStatus.SUCCEEDED
                ),
            )
            for i in range(branches)
        ],
        batch_size=2000,
    )
    return run


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
    html, _ = _page(clients["alice"], run)  # noqa: F405
    assert "SUCCEEDED 3" in html.split('id="branches"')[1].split("</table>")[0]
