"""/metrics: protected by a bearer token, the overview's figures (from
``runs.stats.overview_stats``) in the Prometheus text format, changing as runs move."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apitokens.services import create_token
from runs.engine.execution.executor import execute_step
from runs.models import Step
from tests.support.metrics import TOKEN, scrape

# The executor closes stale connections between steps, so data must be committed.
pytestmark = pytest.mark.django_db(transaction=True)
BODY = {
    "workflow": "room_temperature",
    "thread_id": "t1",
    "input": {"question": "How warm is the living room?"},
}


def runs_in(samples, state: str) -> float:
    return samples[("agentops_runs", (("state", state),))]


def test_it_refuses_scrapes_without_the_token(settings):
    settings.AGENTOPS_METRICS_TOKEN = None
    assert Client().get("/metrics").status_code == 403
    settings.AGENTOPS_METRICS_TOKEN = TOKEN
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


def test_it_exposes_the_overview_figures_as_they_change(metrics_on, worker):
    before = scrape()
    assert runs_in(before, "PENDING") == 0 and runs_in(before, "SUCCEEDED") == 0
    for name in (
        "agentops_runs_stuck",
        "agentops_takeovers_open",
        "agentops_approvals_pending",
        "agentops_steps_unknown",
    ):
        assert (name, ()) in before
    labels = {key[0] for key in before}
    assert not any("run_id" in str(key[1]) for key in before)

    user = User.objects.create_user("alice")
    _, raw = create_token(user)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    for i in range(2):
        client.post(
            "/api/v1/runs",
            json.dumps({**BODY, "thread_id": f"t{i}"}),
            content_type="application/json",
        )
    created = scrape()
    assert runs_in(created, "PENDING") == 2
    assert created[("agentops_queue_depth", ())] == 2

    while (step := Step.objects.filter(status="PENDING").order_by("pk").first()) is not None:
        execute_step(step.pk, worker)
    done = scrape()
    assert runs_in(done, "PENDING") == 0 and runs_in(done, "SUCCEEDED") == 2
    assert done[("agentops_queue_depth", ())] == 0
    assert done[("agentops_window_events", (("kind", "steps_succeeded"), ("window", "hour")))] == 6
    assert done[("agentops_window_events", (("kind", "runs_created"), ("window", "day")))] == 2
    assert ("agentops_step_duration_seconds", (("quantile", "0.5"), ("step", "reply"))) in done
    assert done[("agentops_run_model_calls_avg", ())] == 2
    assert "agentops_runs" in labels
