"""/metrics and the overview count runs waiting for signals and timers (with the oldest
of each) and the schedules that missed ticks."""

from datetime import timedelta

import pytest

from runs.engine.control import lifecycle, schedules
from runs.engine.control.waits import deliver_signal
from runs.engine.state.clock import db_now
from runs.models import Schedule
from runs.stats import overview_stats
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_in_process
from tests.support.metrics import scrape

pytestmark = pytest.mark.django_db(transaction=True)


def order(thread: str) -> str:
    run = lifecycle.start_run(
        "order_followup", thread_id=thread, input={"order": thread, "delay_s": 3600}
    )
    return str(run.pk)


def test_it_counts_signal_waits_timers_and_missed_ticks(metrics_on, clients):
    empty = scrape()
    assert empty[("agentops_signal_waits", ())] == 0
    assert empty[("agentops_timers_sleeping", ())] == 0

    order("o-1")
    sleeping = order("o-2")
    deliver_signal(sleeping, "payment", {"amount": 1}, actor="test")
    run_worker_in_process()
    schedules.create_schedule("late", "bench_noop", every=2, catchup="none")
    Schedule.objects.filter(name="late").update(
        next_fire_at=db_now().replace(microsecond=0) - timedelta(seconds=30)
    )
    schedules.fire_due_schedules("test", 10)

    samples = scrape()
    assert samples[("agentops_signal_waits", ())] == 1
    assert samples[("agentops_timers_sleeping", ())] == 1
    assert samples[("agentops_signal_wait_oldest_seconds", ())] >= 0
    assert samples[("agentops_timer_oldest_seconds", ())] >= 0
    # 30 s behind on a 2 s grid is 14 or 15 ticks by the second's parity; one is fired.
    assert samples[("agentops_schedule_missed_ticks", (("schedule", "late"),))] >= 13
    stats = overview_stats(storage=False)
    assert stats["signal_waits"] == 1 and stats["timers_sleeping"] == 1
    page = clients["alice"].get("/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="stat-signal-waits">1<' in page and 'id="stat-timers">1<' in page
    assert "late: " in page
