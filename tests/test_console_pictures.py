"""The console's pictures: server-rendered SVG with a text equivalent, for a run with
retried attempts and an approval wait, for an empty database, and their query counts
(bounded, whatever the number of runs)."""

import time

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agentops.authoring import RetryPolicy, StepError, Workflow, register
from approvals.services import decide
from runs.console.charts import overview_charts, run_timeline, workers_chart
from runs.engine.control import lifecycle
from runs.engine.state.clock import db_now
from runs.engine.state.gateway import run_transaction
from runs.models import Approval
from runs.stats import open_runs_series, step_outcome_series, worker_steps_series
from runs.workflows import registry
from tests.support.browser import browser, open_as  # noqa: F401 - fixtures
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import work_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def flaky_workflow():
    """``fetch`` fails twice with RATE_LIMITED, succeeds on its third attempt; then an
    approval; then ``finish``."""
    workflow = Workflow("pictures_flaky", version=1, input_fields={"n": int})

    @workflow.step(retry=RetryPolicy(max_attempts=4, initial_delay=0.2, max_delay=0.3))
    def fetch(ctx):
        if ctx.attempt < 3:
            raise StepError("RATE_LIMITED", f"busy (attempt {ctx.attempt})")
        return {"ok": True}

    @workflow.approval()
    def confirm(ctx):
        return {"question": "Go on?", "reason": "a person checks", "evidence": {}}

    @workflow.step()
    def finish(ctx):
        return {"done": True}

    register(workflow)
    yield workflow
    registry.unregister("pictures_flaky", 1)


@pytest.fixture
def retried_and_approved(actors, flaky_workflow):
    run = lifecycle.start_run("pictures_flaky", thread_id="P1", input={"n": 1})
    run = work_until(run, {"WAITING_APPROVAL"})
    # The approver (the simulated person) takes a moment: the approval wait the timeline
    # draws has a length, not a condition to wait for.
    time.sleep(0.3)
    decide(Approval.objects.get(run=run), decision="approve", user=actors["carol"])
    return work_until(run, {"SUCCEEDED"})


def test_the_run_timeline_shows_attempts_failures_and_waits(clients, retried_and_approved):
    run = retried_and_approved
    timeline = run_timeline(run, db_now())
    fetch, confirm, finish = timeline.rows
    assert [b["outcome"] for b in fetch["bars"]] == ["failed", "failed", "succeeded"]
    assert [b["mark"] for b in fetch["bars"]] == ["✕", "✕", "✓"]
    assert [w["label"] for w in fetch["waits"]] == ["retry backoff", "retry backoff"]
    assert [w["label"] for w in confirm["waits"]] == ["approval (approved)"]
    assert [b["mark"] for b in confirm["bars"]] == ["?"]
    xs = [b["x"] for b in fetch["bars"]]
    assert xs == sorted(xs) and all(timeline.left <= x <= timeline.plot_right for x in xs)
    assert "3 steps, 5 attempts (2 failed), 3 waits" in timeline.desc

    page = clients["alice"].get(reverse("console:run", args=[run.pk])).content.decode()
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert '<title id="timeline-title">' in svg and "<desc" in svg
    assert svg.count('class="attempt attempt-failed"') == 2
    assert "retry backoff" in svg and "approval" in svg
    table = page[page.index('id="chart-run-timeline-table"') :]
    assert "wait: approval (approved)" in table and "wait: retry backoff" in table
    assert "attempt 3" in table


def test_the_pictures_render_for_an_empty_database(clients):
    for url in ("console:overview", "console:workers"):
        page = clients["alice"].get(reverse(url)).content.decode()
        assert page.count("<svg") >= 1 and "Nothing recorded in this period." in page
        assert "The numbers as a table" in page
    starts, series = step_outcome_series()
    assert len(starts) == 72 and series == {"succeeded": [0] * 72, "failed": [0] * 72}


def test_the_overview_counts_steps_and_open_runs_per_5_minutes(actors, flaky_workflow):
    run = lifecycle.start_run("pictures_flaky", thread_id="P2", input={"n": 1})
    waiting = work_until(run, {"WAITING_APPROVAL"})
    lifecycle.start_run("pictures_flaky", thread_id="P3", input={"n": 1})  # PENDING
    starts, outcomes = step_outcome_series()
    assert sum(outcomes["succeeded"]) == 1 and sum(outcomes["failed"]) == 2
    _, open_runs = open_runs_series()
    # Now: one run waiting for approval, one pending; 6 hours ago: none.
    assert open_runs["WAITING_APPROVAL"][-1] == 1 and open_runs["PENDING"][-1] == 1
    assert open_runs["WAITING_APPROVAL"][0] == 0 and open_runs["PENDING"][0] == 0
    _, per_worker = worker_steps_series()
    assert sum(sum(v) for v in per_worker.values()) == 3  # 2 failed attempts + 1 success
    charts = overview_charts(db_now())
    assert [c.id for c in charts] == ["chart-step-outcomes", "chart-open-runs"]
    rows = charts[0].table.rows
    assert (sum(int(r[1]) for r in rows), sum(int(r[2]) for r in rows)) == (1, 2)
    assert waiting.status == "WAITING_APPROVAL"


def test_the_pictures_cost_a_bounded_number_of_queries(clients, flaky_workflow):
    def queries(url):
        # The storage figures are cached for a minute: every visit pays for them,
        # so the count does not depend on when the cache last expired.
        cache.clear()
        with CaptureQueriesContext(connection) as captured:
            assert clients["alice"].get(url).status_code == 200
        return len(captured)

    overview = reverse("console:overview")
    workers = reverse("console:workers")
    few = (queries(overview), queries(workers))
    for i in range(20):
        run = lifecycle.start_run("pictures_flaky", thread_id=f"Q{i}", input={"n": 1})
    work_until(run, {"WAITING_APPROVAL"})
    assert (queries(overview), queries(workers)) == few


def test_the_svg_escapes_untrusted_names(clients):
    run = lifecycle.start_run(
        "room_temperature", thread_id="X", input={"question": "How warm is it?"}
    )
    with run_transaction(run.pk) as tx:
        tx.event("step.succeeded", {"attempt": 1}, actor='<script>alert("w")</script>')
    chart = workers_chart(db_now())
    assert [s.name for s in chart.series] == ['<script>alert("w")</script>']
    page = clients["alice"].get(reverse("console:workers")).content.decode()
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert "<script" not in svg and "&lt;script&gt;" in svg


# -- in a real browser ----------------------------------------------------------------


def _figure_shot(page, selector: str, path) -> None:
    figure = page.locator(selector)
    figure.scroll_into_view_if_needed()
    box = figure.locator("svg").bounding_box()
    assert box and box["width"] > 300 and box["height"] > 60
    figure.screenshot(path=str(path))


# The browser fixtures come from the console's browser tests (imported above).
def test_the_pictures_open_in_chromium(open_as, retried_and_approved, tmp_path):  # noqa: F811
    run = retried_and_approved
    page = open_as("alice")
    page.goto(page.base + reverse("console:run", args=[run.pk]))
    timeline = page.locator("#chart-run-timeline")
    assert timeline.locator("svg title").first.text_content().startswith("Timeline of run")
    assert timeline.locator("g.attempt-failed").count() == 2
    assert timeline.locator("g.wait", has_text="approval").count() == 1
    _figure_shot(page, "#chart-run-timeline", tmp_path / "run-timeline.png")
    timeline.locator("summary").click()
    assert "wait: approval" in timeline.locator("table").inner_text()

    page.goto(page.base + reverse("console:overview"))
    for chart in ("#chart-step-outcomes", "#chart-open-runs"):
        _figure_shot(page, chart, tmp_path / f"{chart[1:]}.png")
    assert page.locator("#chart-step-outcomes rect[fill^='url(']").count() >= 1  # hatched
    page.goto(page.base + reverse("console:workers"))
    _figure_shot(page, "#chart-worker-steps", tmp_path / "workers.png")
    assert page.locator("#chart-worker-steps polyline").count() >= 1
    print(f"screenshots in {tmp_path}")


def test_an_operator_replays_a_failed_run_in_chromium(open_as, actors, tmp_path):  # noqa: F811
    from lab.sim import devices

    with devices.lamp.locked() as data:
        data["state"]["fail_next"] = {"get_brightness": ["PERMISSION_DENIED"]}
    run = lifecycle.start_run("dim_lights", thread_id="B", input={"request": "dim it"})
    run = work_until(run, {"FAILED"})
    page = open_as("bob")
    page.goto(page.base + reverse("console:run", args=[run.pk]))
    page.click("#replay-link")
    page.locator("#ops-reused").wait_for()
    page.screenshot(path=str(tmp_path / "replay-preview.png"), full_page=True)
    page.fill("#replay-confirm input[name=reason]", "lamp permissions fixed")
    page.click("#replay-confirm button[type=submit]")
    page.locator("#replay-of").wait_for()
    [new] = run.replays.all()
    assert page.url.endswith(reverse("console:run", args=[new.pk]))
    assert str(run.pk) in page.locator("#replay-of").inner_text()
