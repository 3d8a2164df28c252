"""``runs.stats.overview_stats``: the one statistics function (overview page, API,
metrics), checked against runs made by the real engine."""

import json
from datetime import timedelta

import pytest
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Value
from django.urls import reverse

from runs.console.triage import triage_groups
from runs.engine.control.cancel import request_cancel
from runs.engine.state.clock import db_now
from runs.models import Run, Step
from runs.stats import looping_run_ids, overview_stats, percentile, spread
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import (
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


def _repeat_steps(run, name: str, times: int) -> None:
    Step.objects.bulk_create(
        Step(run=run, name=name, seq=100 + i, status="SUCCEEDED") for i in range(times)
    )


def test_it_counts_an_active_run_repeating_one_step_as_looping_and_a_quiet_one_as_stuck(
    actors, settings
):
    settings.AGENTOPS_LOOP_REPEATS = 5
    active, quiet, short = (start_room_temperature(t) for t in ("L1", "L2", "L3"))
    # After the starts: a first step due at its creation is not a timer still ahead.
    now = db_now()
    for run in (active, quiet):
        _repeat_steps(run, "plan", 5)
    _repeat_steps(short, "plan", 3)
    # PENDING: a progressing state, as the runs start.
    Run.objects.filter(pk__in=[active.pk, quiet.pk, short.pk]).update(last_event_at=now)
    quiet_since = now - timedelta(seconds=settings.AGENTOPS_STUCK_SECONDS + 60)
    Run.objects.filter(pk=quiet.pk).update(last_event_at=quiet_since)

    assert looping_run_ids(now) == [active.pk]
    stats = overview_stats(now)
    assert stats["looping_runs"] == 1
    assert stats["stuck_runs"] == 1  # the quiet one: no event for too long
    no_progress = next(g for g in triage_groups(now) if g.cause == "no_progress")
    assert {item["run"].pk for item in no_progress.items} == {active.pk, quiet.pk}


def test_it_ranks_durations_per_group_in_the_database_as_in_python(actors):
    runs = [start_room_temperature(f"D{i}") for i in range(4)]
    for i, run in enumerate(runs):
        Run.objects.filter(pk=run.pk).update(created_at=F("created_at") - timedelta(seconds=i + 1))
    query = Run.objects.annotate(
        age=ExpressionWrapper(
            Value(db_now(), output_field=DateTimeField()) - F("created_at"),
            output_field=DurationField(),
        )
    )
    result = spread(query, "status", "age", (0.5, 0.95))
    ages = sorted((db_now() - r.created_at).total_seconds() for r in Run.objects.all())
    (row,) = result.values()
    assert row["count"] == 4
    # Nearest rank: the 2nd of 4 for p50, the 4th for p95 and the maximum.
    assert row[0.5] < row[0.95] == row["max"]
    assert abs(row["max"] - ages[-1]) < 1


def test_a_quiet_run_waiting_for_a_signal_before_its_deadline_is_not_stuck(
    actors, clients, settings
):
    """One rule for the console's "stuck" filter, the overview (and so ``/metrics``)
    and the watchdog: a signal wait with its deadline ahead is silent by design; once
    the deadline has passed without the timeout firing, the quiet run is stuck."""
    from runs.engine.control.lifecycle import start_run
    from runs.engine.execution import watchdog

    run = start_run("order_followup", thread_id="quiet", input={"order": "A1", "delay_s": 0})
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "WAITING_EXTERNAL"
    now = db_now()
    quiet_since = now - timedelta(seconds=settings.AGENTOPS_STUCK_SECONDS + 60)
    Run.objects.filter(pk=run.pk).update(last_event_at=quiet_since)

    def counted() -> tuple[int, set, int]:
        page = clients["alice"].get(reverse("console:runs"), {"stuck": "true"})
        return (
            overview_stats(db_now())["stuck_runs"],
            {r.pk for r in page.context["runs"]},
            watchdog.flag_stuck_runs("watchdog", 100),
        )

    assert counted() == (0, set(), 0)
    Step.objects.filter(run=run, name="await_payment").update(wait_until=now - timedelta(seconds=5))
    assert counted() == (1, {run.pk}, 1)
