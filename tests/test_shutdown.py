"""Graceful shutdown: SIGTERM during a step lets it finish and save, the worker
exits 0, and nothing runs twice; on database polling and on RQ."""

import signal

import pytest

from tests.control_support import facts, status, step_status, wait_until, weekly_input
from tests.support.services import BACKENDS


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigterm_lets_the_running_step_finish_and_save(deployment_factory, backend):
    d = deployment_factory(backend, {"AGENTOPS_LEASE_SECONDS": 2, "AGENTOPS_POLL_SECONDS": 0.2})
    run_id = d.manage(
        "runs",
        "start",
        "weekly_report",
        "--thread",
        "S",
        "--input",
        weekly_input(delays={"analyze": 2}),
        check=True,
    ).stdout.strip()
    worker = d.popen("worker")
    wait_until(lambda: step_status(d, run_id, "analyze") == "RUNNING", what="analyze to run")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=120) == 0, d.logs(worker)

    first_log = d.logs(worker)[0]
    assert "ENTER analyze" in first_log and "ENTER draft_report" not in first_log
    info = facts(d, run_id)
    analyze = next(s for s in info["steps"] if s["name"] == "analyze")
    assert analyze["status"] == "SUCCEEDED" and analyze["attempt"] == 1
    assert analyze["lease_until"] is None
    assert "after:analyze" in [c["name"] for c in info["checkpoints"]]
    assert step_status(d, run_id, "draft_report") == "PENDING"

    second = d.manage("worker", "--burst", timeout=180, check=True)
    assert "ENTER draft_report" in second.stdout
    assert "ENTER analyze" not in second.stdout and "ENTER collect_sources" not in second.stdout
    assert status(d, run_id)["status"] == "WAITING_APPROVAL"
    attempts = {s["name"]: s["attempt"] for s in facts(d, run_id)["steps"]}
    assert attempts == {
        "collect_sources": 1,
        "deduplicate": 1,
        "analyze": 1,
        "draft_report": 1,
        "approve_publication": 1,
    }
