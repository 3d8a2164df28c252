"""``runs.stats.overview_stats``: the one statistics function (overview page, API,
metrics), checked against runs made by the real engine."""

import json

import pytest

from runs.engine.control.cancel import request_cancel
from runs.models import Run
from runs.stats import overview_stats, percentile
from tests.console_helpers import *  # noqa: F403 - fixtures
from tests.console_helpers import (
    run_worker_in_process,
    start_room_temperature,
)

# In-process workers manage their own connections: transactional tests.
pytestmark = pytest.mark.django_db(transaction=True)


def by_state(stats) -> dict[str, int]:
    return {row["state"]: row["count"] for row in stats["runs_by_state"]}


def test_it_computes_the_overview_from_real_runs(actors):
    for thread in ("A", "B"):
        start_room_temperature(thread)
    run_worker_in_process()
    start_room_temperature("C", budget={"model_calls": 0})
    run_worker_in_process()
    cancelled = start_room_temperature("D")
    request_cancel(cancelled, actor="user:bob", reason="test")
    pending = start_room_temperature("E")
    Run.objects.filter(pk=pending.pk).update(stuck_since=pending.created_at)

    stats = overview_stats()
    json.dumps(stats)  # the API and metrics serve it as is
    counts = by_state(stats)
    assert counts["SUCCEEDED"] == 2 and counts["PAUSED"] == 1
    assert counts["CANCELLED"] == 1 and counts["PENDING"] == 1
    assert stats["runs_total"] == 5
    assert stats["stuck_runs"] == 1
    assert stats["takeovers_open"] == 1 and stats["unknown_steps"] == 0
    assert stats["approvals_pending"] == 0 and stats["approval_oldest_s"] is None
    hour = stats["windows"]["hour"]
    assert hour["runs_created"] == 5
    assert hour["steps_succeeded"] == 6 and hour["steps_failed"] == 0
    assert hour["step_success_rate"] == 1.0
    assert hour["takeovers_opened"] == 1 and hour["takeover_rate"] == 0.2
    assert stats["windows"]["day"]["runs_created"] == 5
    durations = {row["name"]: row for row in stats["step_durations"]}
    assert set(durations) == {"plan", "read_temperature", "reply"}
    assert all(row["count"] == 2 and row["p50_s"] <= row["p95_s"] for row in durations.values())
    assert stats["cancel_to_cancelled"]["count"] == 1
    pending_row = next(r for r in stats["runs_by_state"] if r["state"] == "PENDING")
    assert pending_row["oldest_s"] is not None and pending_row["oldest_s"] >= 0
    assert stats["per_run"]["runs"] == 5 and stats["per_run"]["model_calls_avg"] == 0.8


def test_it_takes_nearest_rank_percentiles():
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.95) == 3.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.95) == 95.0
