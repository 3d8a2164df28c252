"""The watchdog: a run with no new event for longer than the threshold is
flagged stuck (Run.stuck_since + a run.stuck event) and listed; progress clears it."""

import os
import signal

from tests.support.deployment_runs import (
    events_of,
    facts,
    start_with_command,
    step_status,
    weekly_input,
)
from tests.support.waiting import wait_until


def test_it_flags_a_silent_run_and_progress_clears_the_flag(deployment_factory):
    d = deployment_factory(
        "sqlite",
        # A lease that outlasts the test: an expired one would be swept, and that event is
        # progress.
        {
            "AGENTOPS_STUCK_SECONDS": 1,
            "AGENTOPS_LEASE_SECONDS": 600,
            "AGENTOPS_SWEEP_SECONDS": 3600,
        },
    )
    run_id = start_with_command(d, "weekly_report", "D", weekly_input(delays={"analyze": 3}))
    worker = d.popen("worker", "--burst")
    wait_until(lambda: step_status(d, run_id, "analyze") == "RUNNING", what="analyze to run")
    # The worker hangs mid-step, so the run stays silent for as long as the sweeps and
    # listings take on a loaded machine (a step's own few seconds may not be enough).
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        assert step_status(d, run_id, "analyze") == "RUNNING"

        def flagged():
            d.manage("sweeper", "--once", check=True)
            return [r for r in d.manage_json("runs", "stuck", "--json") if r["run_id"] == run_id]

        [row] = wait_until(flagged, what="the watchdog to flag the run")
        assert row["status"] == "RUNNING"
        info = facts(d, run_id)
        [stuck] = events_of(info, "run.stuck")
        assert stuck["actor"].startswith("sweeper:") and stuck["payload"]["step"] == "analyze"
    finally:
        os.kill(worker.pid, signal.SIGCONT)

    assert worker.wait(timeout=180) == 0
    info = facts(d, run_id)
    assert info["run"]["status"] == "WAITING_APPROVAL" and info["run"]["stuck_since"] is None
    assert d.manage_json("runs", "stuck", "--json") == []
    # Waiting for a person is not stuck.
    d.manage("sweeper", "--once", check=True)
    assert len(events_of(facts(d, run_id), "run.stuck")) == 1
