"""Redis only notifies: flushed or stopped mid-run, nothing is lost. The
sweeper and startup recovery re-notify from the database, and an RQ worker whose Redis
vanished keeps working from the database until Redis answers again."""

import signal
import time

import pytest
import redis

from tests.support.deployment_runs import (
    QUICK_LOOPS,
    db_rows,
    facts,
    make_user,
    run_status,
    start_with_command,
    status,
    step_status,
    weekly_input,
)
from tests.support.services import require_services
from tests.support.waiting import wait_until

OUTAGE_SECONDS = 10


def approve_when_waiting(d, run_id):
    wait_until(
        lambda: run_status(d, run_id) == "WAITING_APPROVAL",
        timeout=180,
        what="WAITING_APPROVAL",
    )
    [approval] = d.manage_json("approvals", "list", "--json")
    d.manage("approvals", "decide", approval["id"], "approve", "--as", "alice", check=True)


def assert_finished_once(d, run_id):
    final = status(d, run_id)
    assert final["status"] == "SUCCEEDED"
    assert final["calls"]["publisher.publish"] == 1 and final["calls"]["newsfeed.fetch"] == 1
    assert all(s["attempt"] == 1 for s in facts(d, run_id)["steps"])


def test_a_run_survives_redis_flushall_at_every_stage(private_redis, deployment_factory):
    # FLUSHALL empties the whole server: a server of this test's own, so parallel tests
    # keep their queues.
    d = deployment_factory("postgres", {**QUICK_LOOPS, "REDIS_URL": private_redis.url()})
    make_user(d, "alice", approver=True)
    client = redis.Redis.from_url(d.env["REDIS_URL"])
    try:
        run_id = start_with_command(d, "weekly_report", "F", weekly_input(delays={"analyze": 2}))
        client.flushall()  # the first notification is gone before any worker saw it
        worker = d.popen("worker")
        wait_until(lambda: step_status(d, run_id, "analyze") == "RUNNING", what="analyze to run")
        client.flushall()  # mid-job: RQ's own keys for the running job vanish
        approve_when_waiting(d, run_id)
        client.flushall()  # the notification for publish is (likely) gone too
        wait_until(
            lambda: run_status(d, run_id) == "SUCCEEDED",
            timeout=180,
            what="SUCCEEDED after FLUSHALL",
        )
    finally:
        client.close()
    assert_finished_once(d, run_id)
    assert worker.poll() is None
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0


def test_a_run_finishes_after_redis_was_stopped_for_ten_seconds(private_redis, deployment_factory):
    d = deployment_factory("postgres", {**QUICK_LOOPS, "REDIS_URL": private_redis.url()})
    make_user(d, "alice", approver=True)
    run_id = start_with_command(d, "weekly_report", "S", weekly_input(delays={"analyze": 2}))
    worker = d.popen("worker")
    wait_until(lambda: step_status(d, run_id, "analyze") == "RUNNING", what="analyze to run")
    private_redis.stop()
    stopped_at = time.monotonic()
    approve_when_waiting(d, run_id)  # decided while Redis is down
    # The outage's length is the simulated fault, not a wait for a condition.
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - stopped_at)))
    assert worker.poll() is None, d.logs(worker)
    private_redis.start()  # back on the same port, empty (no persistence)
    wait_until(
        lambda: run_status(d, run_id) == "SUCCEEDED",
        timeout=180,
        what="SUCCEEDED after the outage",
    )
    assert_finished_once(d, run_id)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    # RQ's command listener (a thread of its own) lost Redis too: a warning line, not
    # a thread's traceback.
    logged = d.logs(worker)[1]
    assert "Traceback" not in logged and "Exception in thread" not in logged, logged[-3000:]
    assert "Redis unavailable or refusing writes" in logged


def test_a_worker_started_while_redis_is_down_works_from_the_database_until_it_is_back(
    private_redis, deployment_factory
):
    # RQ's worker talks to Redis as it is built (CLIENT SETNAME): down then, or a
    # connection cut at that moment, must not end the worker process.
    d = deployment_factory("postgres", {**QUICK_LOOPS, "REDIS_URL": private_redis.url()})
    private_redis.stop()
    question = '{"question": "How warm is the living room?"}'
    first = start_with_command(d, "room_temperature", "A", question)
    worker = d.popen("worker", "--mode", "rq")
    wait_until(
        lambda: worker.poll() is not None or run_status(d, first) == "SUCCEEDED",
        timeout=180,
        what="first run",
    )
    assert worker.poll() is None, d.logs(worker)
    private_redis.start()
    wait_until(lambda: "back to RQ dispatch" in d.logs(worker)[1], timeout=120, what="RQ dispatch")
    second = start_with_command(d, "room_temperature", "B", question)
    wait_until(lambda: run_status(d, second) == "SUCCEEDED", timeout=180, what="second run")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, d.logs(worker)


@pytest.fixture(autouse=True)
def _postgres_only():
    require_services()


def _fill(client: redis.Redis) -> int:
    """Fill Redis up to a small ``maxmemory`` (noeviction): every write is then refused
    while reads and PING still answer. Returns the keys written."""
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", used + 512 * 1024)
    written = 0
    try:
        while True:
            client.set(f"ballast:{written}", b"x" * 16384)
            written += 1
    except redis.exceptions.OutOfMemoryError:
        pass
    return written


def test_a_full_redis_neither_stops_runs_nor_spins_the_worker(private_redis, deployment_factory):
    # maxmemory is server-wide: a server of this test's own.
    client = redis.Redis(port=private_redis.port)
    try:
        assert _fill(client) > 0
        d = deployment_factory("postgres", {**QUICK_LOOPS, "REDIS_URL": private_redis.url()})
        worker = d.popen("worker")
        run_ids = [
            start_with_command(
                d, "room_temperature", f"full-{i}", '{"question": "How warm is it?"}'
            )
            for i in range(3)
        ]
        for run_id in run_ids:
            wait_until(
                lambda run_id=run_id: run_status(d, run_id) == "SUCCEEDED",
                timeout=180,
                what="SUCCEEDED with Redis full",
            )
        # The worker's own heartbeat shows it alive 3 s after the last run: a spinning
        # worker would have logged thousands of lines by then.
        [(idle_from,)] = db_rows(d, "SELECT now()")
        wait_until(
            lambda: db_rows(
                d,
                "SELECT 1 FROM runs_workerprocess WHERE stopped_at IS NULL "
                "AND heartbeat_at >= %s + interval '3 seconds'",
                (idle_from,),
            ),
            what="the worker's heartbeat 3 s after the last run",
            timeout=60,
            procs=[worker],
        )
        _, err = d.logs(worker)
        assert err.count("working from the database") <= 2, err[-3000:]
        assert len(err.splitlines()) < 100, err[-3000:]
        client.config_set("maxmemory", 0)  # room again: the worker returns to RQ
        wait_until(
            lambda: "back to RQ dispatch" in d.logs(worker)[1],
            timeout=90,
            what="the worker back on RQ",
        )
        assert worker.poll() is None
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        client.close()


def test_a_worker_whose_redis_stops_answering_works_from_the_database_within_the_bound(
    private_redis, deployment_factory
):
    # A frozen redis-server (SIGSTOP) keeps its connections open and answers nothing, as
    # a partition does: without timeouts RQ's bookkeeping after the step would wait for
    # minutes. Each Redis call gives up after AGENTOPS_REDIS_TIMEOUT.
    bound = 2
    d = deployment_factory(
        "postgres",
        {**QUICK_LOOPS, "REDIS_URL": private_redis.url(), "AGENTOPS_REDIS_TIMEOUT": bound},
    )
    question = '{"question": "How warm is the living room?"}'
    first = start_with_command(d, "weekly_report", "Z", weekly_input(delays={"analyze": 2}))
    worker = d.popen("worker", "--mode", "rq")
    wait_until(lambda: step_status(d, first, "analyze") == "RUNNING", what="analyze to run")
    private_redis.proc.send_signal(signal.SIGSTOP)
    try:
        frozen_at = time.monotonic()
        # Created while Redis is frozen: their notifications are lost (each `runs
        # start` gives up on Redis after the bound), the worker finds them in the
        # database.
        during = [start_with_command(d, "room_temperature", f"Z{i}", question) for i in range(2)]
        # The worker's slots run all three at once: the first run's chain reaches its
        # approval while, before or after the others finish.
        wait_until(
            lambda: all(run_status(d, r) == "SUCCEEDED" for r in during)
            and run_status(d, first) == "WAITING_APPROVAL",
            timeout=60,
            what="runs created while Redis is frozen to finish, the first at its approval",
        )
        finished_after = time.monotonic() - frozen_at
        assert "working from the database" in d.logs(worker)[1]
        # RQ's own "quitting" ERROR is reworded: this worker does not quit.
        assert "quitting" not in d.logs(worker)[1]
        assert worker.poll() is None, d.logs(worker)
    finally:
        private_redis.proc.send_signal(signal.SIGCONT)
    healed_at = time.monotonic()
    wait_until(lambda: "back to RQ dispatch" in d.logs(worker)[1], timeout=30, what="RQ again")
    back_after = time.monotonic() - healed_at
    # Two `runs start` commands each waited one bound on the frozen server.
    assert finished_after < 60, finished_after
    assert back_after < 4 * bound, back_after
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, d.logs(worker)
