"""The watchdog: a run with no new event for longer than the threshold is
flagged stuck (Run.stuck_since + a run.stuck event) and listed; progress clears it."""

from tests.control_support import events_of, facts, step_status, wait_until, weekly_input


def test_it_flags_a_silent_run_and_progress_clears_the_flag(deployment_factory):
    d = deployment_factory(
        "sqlite",
        {"AGENTOPS_STUCK_SECONDS": 1, "AGENTOPS_LEASE_SECONDS": 2, "AGENTOPS_SWEEP_SECONDS": 3600},
    )
    run_id = d.manage(
        "runs",
        "start",
        "weekly_report",
        "--thread",
        "D",
        "--input",
        weekly_input(delays={"analyze": 2}),
        check=True,
    ).stdout.strip()
    worker = d.popen("worker", "--burst")
    wait_until(lambda: step_status(d, run_id, "analyze") == "RUNNING", what="analyze to run")

    def flagged():
        d.manage("sweeper", "--once", check=True)
        return [r for r in d.manage_json("runs", "stuck", "--json") if r["run_id"] == run_id]

    [row] = wait_until(flagged, what="the watchdog to flag the run")
    assert row["status"] == "RUNNING"
    info = facts(d, run_id)
    [stuck] = events_of(info, "run.stuck")
    assert stuck["actor"].startswith("sweeper:") and stuck["payload"]["step"] == "analyze"

    assert worker.wait(timeout=180) == 0
    info = facts(d, run_id)
    assert info["run"]["status"] == "WAITING_APPROVAL" and info["run"]["stuck_since"] is None
    assert d.manage_json("runs", "stuck", "--json") == []
    # Waiting for a person is not stuck.
    d.manage("sweeper", "--once", check=True)
    assert len(events_of(facts(d, run_id), "run.stuck")) == 1
