"""Cancellation as a flow, with real worker subprocesses: a running step stops
at its safe point, its lease is released, compensations run once, the run ends
CANCELLED, artifacts stay, and a result arriving after CANCELLED changes nothing."""

import os
import signal

import pytest

from tests.support.deployment_runs import (
    QUICK_LOOPS,
    db_rows,
    events_of,
    expire_leases,
    facts,
    make_user,
    run_status,
    start_with_command,
    status,
    step_status,
    weekly_input,
)
from tests.support.services import BACKENDS
from tests.support.waiting import wait_until


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_cancels_a_running_step_at_its_safe_point(deployment_factory, backend):
    d = deployment_factory(backend, QUICK_LOOPS)
    run_id = start_with_command(d, "weekly_report", "C", weekly_input(delays={"analyze": 30}))
    worker = d.popen("worker")
    wait_until(lambda: step_status(d, run_id, "analyze") == "RUNNING", what="analyze to run")

    asked = d.manage("runs", "cancel", run_id, "--reason", "wrong week", check=True)
    assert "CANCEL" in asked.stdout
    wait_until(lambda: run_status(d, run_id) == "CANCELLED", what="CANCELLED")

    info = facts(d, run_id)
    analyze = next(s for s in info["steps"] if s["name"] == "analyze")
    assert analyze["status"] == "CANCELLED" and analyze["attempt"] == 1
    assert analyze["owner"] == "" and analyze["lease_until"] is None
    [stopped] = [e for e in events_of(info, "step.cancelled") if e["step_id"] == analyze["pk"]]
    worker_id = d.logs(worker)[0].split()[1]
    assert stopped["actor"] == worker_id  # the worker stopped it, not a lease expiry
    assert [e["type"] for e in info["events"]].count("run.cancelled") == 1
    assert events_of(info, "run.cancel_requested")[0]["payload"]["reason"] == "wrong week"
    assert info["run"]["cancel_reason"] == "wrong week"
    calls = status(d, run_id)["calls"]
    assert calls["publisher.reserve"] == 1 and calls["publisher.release"] == 1
    [cancelled] = events_of(info, "run.cancelled")
    assert cancelled["payload"]["compensation"]["steps"][0]["step"] == "collect_sources"
    assert [s["status"] for s in info["steps"]] == ["SUCCEEDED", "SUCCEEDED", "CANCELLED"]

    # The worker is still alive and healthy, and stops cleanly.
    assert worker.poll() is None
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0


def test_it_rejects_a_late_success_from_the_cancelled_worker(deployment_factory):
    # A lease that outlasts the test, so it is surely live when the cancel command runs;
    # the test then expires it itself (expire_leases) instead of waiting it out.
    d = deployment_factory("sqlite", {**QUICK_LOOPS, "AGENTOPS_LEASE_SECONDS": 600})
    run_id = start_with_command(
        d, "weekly_report", "L", weekly_input(delays={"collect_sources": 20})
    )
    worker = d.popen("worker")
    key = run_id.replace("-", "")  # SQLite stores UUIDs as 32 hex digits

    def in_the_long_wait():
        # The news feed read is recorded right before the step's uninterruptible wait.
        return db_rows(
            d,
            "SELECT status FROM runs_operation WHERE run_id = %s AND tool = %s",
            (key, "newsfeed.fetch"),
        ) == [("SUCCEEDED",)]

    wait_until(in_the_long_wait, interval=0.05, what="collect_sources to reach its long wait")
    os.kill(worker.pid, signal.SIGSTOP)  # the worker hangs: no heartbeat, no safe point
    try:
        asked = d.manage("runs", "cancel", run_id, "--reason", "hung", check=True)
        assert "waiting for the current operation" in asked.stdout
        assert expire_leases(d, run_id) == 1  # the hung worker's lease runs out

        def swept_to_cancelled():
            d.manage("sweeper", "--once", check=True)
            return status(d, run_id)["status"] == "CANCELLED"

        wait_until(swept_to_cancelled, what="the sweeper to finish the cancel")
    finally:
        os.kill(worker.pid, signal.SIGCONT)

    def rejected():
        # Straight from the database: a manage.py process per poll costs a second of CPU.
        return db_rows(
            d,
            "SELECT 1 FROM runs_event WHERE run_id = %s AND type = %s",
            (key, "step.commit_rejected"),
        )

    wait_until(rejected, what="the late commit to be rejected")
    info = facts(d, run_id)
    [late] = events_of(info, "step.commit_rejected")
    assert late["payload"]["reason"] == "run is CANCELLED"
    assert info["run"]["status"] == "CANCELLED"
    assert [(s["name"], s["status"]) for s in info["steps"]] == [("collect_sources", "CANCELLED")]
    assert "after:collect_sources" not in [c["name"] for c in info["checkpoints"]]
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0


def test_it_cancels_a_waiting_run_and_keeps_its_artifacts(deployment_factory):
    d = deployment_factory("sqlite")
    make_user(d, "alice", approver=True)
    run_id = start_with_command(d, "weekly_report", "W", weekly_input())
    d.manage("worker", "--burst", timeout=120, check=True)
    assert status(d, run_id)["status"] == "WAITING_APPROVAL"

    out = d.manage("runs", "cancel", run_id, "--reason", "not this week", check=True).stdout
    assert "CANCELLED" in out
    info = facts(d, run_id)
    assert info["run"]["status"] == "CANCELLED"
    assert info["approvals"][0]["status"] == "CANCELLED"
    assert info["steps"][-1]["status"] == "CANCELLED"
    media = d.var_dir / "artifacts"
    assert sorted(a["name"] for a in info["artifacts"]) == ["report.md", "sources.json"]
    for artifact in info["artifacts"]:
        assert (media / artifact["uri"]).stat().st_size == artifact["size"]
    assert status(d, run_id)["calls"]["publisher.release"] == 1

    late = d.manage("approvals", "decide", info["approvals"][0]["pk"], "approve", "--as", "alice")
    assert late.returncode != 0 and "decision_conflict" in late.stderr
    again = d.manage("runs", "cancel", run_id, "--reason", "twice")
    assert again.returncode != 0 and "run_terminal" in again.stderr
    d.manage("worker", "--burst", timeout=120, check=True)
    assert status(d, run_id)["status"] == "CANCELLED"
    assert "publisher.publish" not in status(d, run_id)["calls"]
