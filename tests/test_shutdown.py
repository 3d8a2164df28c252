"""Graceful shutdown: SIGTERM during a step lets it finish and save, the worker
exits 0, and nothing runs twice; on database polling and on RQ."""

import signal

import pytest
import redis
from rq import Queue

from runs.engine.execution.identity import WorkerIdentity
from runs.engine.execution.worker import rq_worker_class
from tests.support.deployment_runs import (
    facts,
    start_with_command,
    status,
    step_status,
    weekly_input,
)
from tests.support.services import BACKENDS
from tests.support.waiting import wait_until


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigterm_lets_the_running_step_finish_and_save(deployment_factory, backend):
    d = deployment_factory(backend, {"AGENTOPS_LEASE_SECONDS": 2, "AGENTOPS_POLL_SECONDS": 0.2})
    run_id = start_with_command(d, "weekly_report", "S", weekly_input(delays={"analyze": 2}))
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


def test_a_stop_requested_while_rq_starts_stops_it_before_its_first_dequeue(private_redis):
    # RQ takes SIGTERM over only once it has connected and registered; a SIGTERM before
    # that reaches the engine's handler alone, and RQ must still not start dequeuing.
    connection = redis.Redis.from_url(private_redis.url())
    queue = Queue("stop-test", connection=connection)
    queue.enqueue("os.getpid")
    identity = WorkerIdentity("stop-test-worker", "rq")
    identity.stopping.set()
    rq_worker = rq_worker_class(identity)([queue], connection=connection, name=identity.worker_id)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        # Without the stop, RQ would take the job and then wait for more until idle.
        rq_worker.work(max_idle_time=20, logging_level="WARNING")
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert queue.count == 1
