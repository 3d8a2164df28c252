"""Side effects happen once: drills with real worker subprocesses on SQLite
(database polling) and PostgreSQL + Redis (RQ).

Only the outside world is faked: the simulated lamp and booking service keep their state
and call logs in files under the deployment's var dir, and a test may seed their quirks
(failures, slowness) there. Waits poll the database or the logs; nothing asserts on time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentops.authoring import RetryPolicy
from tests.support.deployment_runs import (
    burst_until,
    db_id,
    db_rows,
    events,
    make_user,
    run_status,
    start,
    status,
)
from tests.support.services import BACKENDS, Deployment
from tests.support.waiting import wait_until

LEASE = {
    "AGENTOPS_LEASE_SECONDS": 2,
    "AGENTOPS_POLL_SECONDS": 0.1,
    "AGENTOPS_SWEEP_SECONDS": 0.5,
    "AGENTOPS_RENOTIFY_SECONDS": 1,
}
REQUEST = json.dumps({"request": "lower the brightness by 10%"})
#: dim_lights' policies (lab/workflows/dim_lights.py) for the backoff checks.
DIM_POLICY = RetryPolicy(max_attempts=3, initial_delay=1.0, max_delay=10.0)


# -- helpers ---------------------------------------------------------------------------


def step_row(d: Deployment, run_id: str, name: str) -> dict:
    rows = db_rows(
        d,
        "SELECT id, status, attempt, not_before FROM runs_step "
        "WHERE run_id = %s AND name = %s ORDER BY seq DESC",
        (db_id(d, run_id), name),
    )
    if not rows:
        return {}
    step_id, st, attempt, not_before = rows[0]
    return {"id": step_id, "status": st, "attempt": attempt, "not_before": not_before}


def lamp(d: Deployment, **state) -> None:
    """Seed the simulated lamp's state (brightness 80 plus quirks)."""
    path = Path(d.env["AGENTOPS_DEVICE_DIR"]) / "lamp.json"
    path.write_text(json.dumps({"state": {"brightness": 80, **state}, "calls": []}))


def device(d: Deployment, name: str) -> dict:
    return json.loads((Path(d.env["AGENTOPS_DEVICE_DIR"]) / f"{name}.json").read_text())


def sigkill_when_hung(d: Deployment, worker: subprocess.Popen, tool: str) -> None:
    """Wait until the worker says it hangs after ``tool`` returned, then SIGKILL it."""
    wait_until(
        lambda: f"HANG after {tool}" in Deployment.logs(worker)[0],
        what=f"HANG after {tool}",
        procs=[worker],
    )
    os.killpg(worker.pid, signal.SIGKILL)
    assert worker.wait(timeout=30) == -signal.SIGKILL


def stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(timeout=60)


@pytest.fixture(params=BACKENDS)
def d(request, deployment_factory) -> Deployment:
    return deployment_factory(request.param, extra_env=LEASE)


# -- crash after the lamp changed --------------------------------------------------------


def test_it_sets_the_lamp_once_when_the_worker_is_sigkilled_after_the_call(d):
    run_id = start(d, "dim_lights", REQUEST, "--hang-after-tool", "set_brightness")
    sigkill_when_hung(d, d.popen("worker", "--burst"), "lamp.set_brightness")
    assert device(d, "lamp")["state"]["brightness"] == 70  # the lamp changed, no result saved

    burst_until(d, "SUCCEEDED", lambda: run_status(d, run_id) == "SUCCEEDED")
    s = status(d, run_id)
    assert s["devices"]["lamp.brightness"] == 70  # never 60
    assert s["calls"]["lamp.set_brightness"] == 1
    verified = events(d, run_id, "operation.verified")
    assert [e["payload"]["answer"] for e in verified] == ["done"]


def test_it_survives_exit_75_after_the_call_as_the_demo_shows(d):
    run_id = start(d, "dim_lights", REQUEST, "--crash-after-tool", "set_brightness")
    first = d.manage("worker", "--burst", timeout=120)
    assert first.returncode == 75, first.stdout + first.stderr

    burst_until(d, "SUCCEEDED", lambda: run_status(d, run_id) == "SUCCEEDED")
    s = status(d, run_id)
    assert (s["status"], s["devices"]["lamp.brightness"], s["calls"]["lamp.set_brightness"]) == (
        "SUCCEEDED",
        70,
        1,
    )


def _paused_unknown(d) -> str:
    run_id = start(
        d, "dim_lights", REQUEST, "--hang-after-tool", "set_brightness", "--lamp-unreadable"
    )
    sigkill_when_hung(d, d.popen("worker", "--burst"), "lamp.set_brightness")
    burst_until(d, "PAUSED", lambda: run_status(d, run_id) == "PAUSED")
    s = status(d, run_id)
    assert s["takeover"]["cause"] == "unknown_outcome"
    assert s["takeover"]["step"] == "set_brightness"
    assert {"name": "set_brightness", "status": "UNKNOWN"}.items() <= s["steps"][2].items()
    assert s["calls"]["lamp.set_brightness"] == 1
    # Nothing more happens without a human: another worker does not touch the lamp.
    d.manage("worker", "--burst", check=True)
    assert status(d, run_id)["calls"]["lamp.set_brightness"] == 1
    return run_id


def test_it_pauses_an_unknown_outcome_and_resolving_done_does_not_call_the_lamp(d):
    run_id = _paused_unknown(d)
    make_user(d, "alice", operator=True)
    out = d.manage(
        "runs",
        "resolve",
        run_id,
        "--step",
        "set_brightness",
        "--outcome",
        "done",
        "--evidence",
        "lamp panel shows 70%",
        "--result",
        '{"brightness": 70}',
        "--as",
        "alice",
        check=True,
    )
    assert "RUNNING" in out.stdout

    burst_until(d, "SUCCEEDED", lambda: run_status(d, run_id) == "SUCCEEDED")
    s = status(d, run_id)
    assert s["calls"]["lamp.set_brightness"] == 1
    assert s["takeover"] is None
    [resolved] = events(d, run_id, "unknown.resolved")
    assert resolved["actor"] == "user:alice"
    assert resolved["payload"]["evidence"] == "lamp panel shows 70%"
    assert resolved["payload"]["outcome"] == "done"


def test_it_calls_the_lamp_exactly_once_more_when_resolved_not_done(d):
    run_id = _paused_unknown(d)
    d.manage(
        "runs",
        "resolve",
        run_id,
        "--step",
        "set_brightness",
        "--outcome",
        "not-done",
        "--evidence",
        "lamp still at 80% on the wall panel",
        check=True,
    )

    burst_until(d, "SUCCEEDED", lambda: run_status(d, run_id) == "SUCCEEDED")
    s = status(d, run_id)
    assert s["calls"]["lamp.set_brightness"] == 2
    assert s["devices"]["lamp.brightness"] == 70


def test_it_refuses_a_resolve_without_evidence_or_of_a_step_that_is_not_unknown(d):
    run_id = start(d, "dim_lights", REQUEST)
    no_evidence = d.manage(
        "runs",
        "resolve",
        run_id,
        "--step",
        "set_brightness",
        "--outcome",
        "done",
        "--evidence",
        " ",
    )
    assert no_evidence.returncode != 0 and "evidence_required" in no_evidence.stderr
    not_paused = d.manage(
        "runs",
        "resolve",
        run_id,
        "--step",
        "set_brightness",
        "--outcome",
        "done",
        "--evidence",
        "x",
    )
    assert not_paused.returncode != 0 and "not_allowed_in_state" in not_paused.stderr


# -- duplicate deliveries -----------------------------------------------------------------


def _deliver(d: Deployment, run_id: str, step_id: int, times: int) -> None:
    """Deliver the step's queue message ``times`` times: RQ jobs on PostgreSQL + Redis,
    the job function in separate processes with database polling."""
    if d.backend == "postgres":
        from redis import Redis
        from rq import Queue

        queue = Queue("default", connection=Redis.from_url(d.env["REDIS_URL"]))
        for _ in range(times):
            queue.enqueue("runs.engine.execution.jobs.execute_step_job", run_id, step_id, 0)
        return
    code = (
        "from runs.engine.execution.jobs import execute_step_job; "
        f"execute_step_job({run_id!r}, {step_id}, 0)"
    )
    procs = [d.popen("shell", "-c", code) for _ in range(times)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, Deployment.logs(proc)


def test_it_runs_the_tool_once_when_the_message_is_delivered_five_times(d):
    lamp(d, delay_s={"set_brightness": 3})  # a slow lamp: duplicates arrive mid-call
    run_id = start(d, "dim_lights", REQUEST)
    workers = [d.popen("worker"), d.popen("worker")]
    step = wait_until(
        lambda: (r := step_row(d, run_id, "set_brightness")) and r["status"] == "RUNNING" and r,
        what="set_brightness RUNNING",
        procs=workers,
    )
    _deliver(d, run_id, step["id"], 5)
    wait_until(lambda: run_status(d, run_id) == "SUCCEEDED", what="SUCCEEDED", procs=workers)
    _deliver(d, run_id, step["id"], 5)
    if d.backend == "postgres":
        from redis import Redis
        from rq import Queue

        queue = Queue("default", connection=Redis.from_url(d.env["REDIS_URL"]))
        wait_until(lambda: queue.count == 0, what="queue drained", procs=workers)
    stop(*workers)

    s = status(d, run_id)
    assert s["calls"]["lamp.set_brightness"] == 1
    assert step_row(d, run_id, "set_brightness")["attempt"] == 1
    assert s["devices"]["lamp.brightness"] == 70


# -- retry policy ---------------------------------------------------------------------------


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


def test_it_retries_a_retryable_error_with_backoff_on_not_before(d):
    lamp(d, fail_next={"set_brightness": ["RATE_LIMITED", "RATE_LIMITED"]})
    run_id = start(d, "dim_lights", REQUEST)
    worker = d.popen("worker")
    wait_until(lambda: run_status(d, run_id) == "SUCCEEDED", what="SUCCEEDED", procs=[worker])
    stop(worker)

    assert step_row(d, run_id, "set_brightness")["attempt"] == 3
    retries = [e["payload"] for e in events(d, run_id, "step.retry_scheduled")]
    assert [r["attempt"] for r in retries] == [1, 2]
    for r in retries:
        low, high = DIM_POLICY.bounds(r["attempt"])
        assert low <= r["delay_s"] <= high
        gap = (_parse(r["not_before"]) - _parse(r["failed_at"])).total_seconds()
        assert abs(gap - r["delay_s"]) < 0.001
        assert r["error_code"] == "RATE_LIMITED"
    # The step row carries the last scheduled not_before (database clock), as the event says.
    stored = step_row(d, run_id, "set_brightness")["not_before"]
    if not isinstance(stored, datetime):
        stored = datetime.fromisoformat(stored).replace(tzinfo=UTC)
    assert stored == _parse(retries[-1]["not_before"])
    # The second delay comes from the doubled base (1 s then 2 s, minus jitter).
    assert DIM_POLICY.bounds(2)[0] > DIM_POLICY.bounds(1)[0]
    s = status(d, run_id)
    assert s["calls"]["lamp.set_brightness"] == 3  # two refused by the lamp, one applied
    assert s["devices"]["lamp.brightness"] == 70


def test_it_does_not_retry_a_non_retryable_error(d):
    lamp(d, fail_next={"set_brightness": ["INVALID_ARGUMENT"]})
    run_id = start(d, "dim_lights", REQUEST)
    d.manage("worker", "--burst", check=True)

    s = status(d, run_id)
    assert step_row(d, run_id, "set_brightness")["attempt"] == 1
    assert events(d, run_id, "step.retry_scheduled") == []
    assert s["calls"]["lamp.set_brightness"] == 1
    # set_brightness declares on_exhausted="takeover".
    assert (s["status"], s["takeover"]["cause"]) == ("PAUSED", "retries_exhausted")


def test_it_fails_or_pauses_as_declared_when_attempts_run_out(d):
    lamp(
        d,
        fail_next={
            "get_brightness": ["DEPENDENCY_UNAVAILABLE"] * 3,
            "set_brightness": ["RATE_LIMITED"] * 3,
        },
    )
    fails = start(d, "dim_lights", REQUEST)  # read_lamp: on_exhausted="fail"
    worker = d.popen("worker")
    wait_until(lambda: run_status(d, fails) == "FAILED", what="FAILED", procs=[worker])
    pauses = start(d, "dim_lights", REQUEST)  # set_brightness: on_exhausted="takeover"
    wait_until(lambda: run_status(d, pauses) == "PAUSED", what="PAUSED", procs=[worker])
    stop(worker)

    assert step_row(d, fails, "read_lamp")["attempt"] == 3
    assert status(d, fails)["error_code"] == "DEPENDENCY_UNAVAILABLE"
    assert step_row(d, pauses, "set_brightness")["attempt"] == 3
    s = status(d, pauses)
    assert s["takeover"]["cause"] == "retries_exhausted"
    assert s["calls"]["lamp.set_brightness"] == 3


# -- budgets --------------------------------------------------------------------------------


def test_it_pauses_before_the_call_that_would_exceed_the_budget_and_resumes_when_raised(d):
    run_id = start(d, "dim_lights", REQUEST, "--budget", '{"tool_calls": 1}')
    d.manage("worker", "--burst", check=True)

    s = status(d, run_id)
    assert s["status"] == "PAUSED"
    assert s["takeover"]["cause"] == "budget_exhausted"
    assert s["takeover"]["step"] == "set_brightness"
    assert "lamp.set_brightness" not in s["calls"]  # paused before the call
    assert s["budget"]["used"]["tool_calls"] == 1

    out = d.manage(
        "runs", "budget", run_id, "--add-tool-calls", "1", "--reason", "approved", check=True
    )
    assert "RUNNING" in out.stdout
    burst_until(d, "SUCCEEDED", lambda: run_status(d, run_id) == "SUCCEEDED")
    s = status(d, run_id)
    assert s["calls"]["lamp.set_brightness"] == 1
    assert s["budget"] == {
        "limits": {"tool_calls": 2},
        "used": {**s["budget"]["used"], "tool_calls": 2},
    }
    [raised] = events(d, run_id, "budget.raised")
    assert (raised["actor"], raised["payload"]["reason"]) == ("cli", "approved")


# -- compensation -----------------------------------------------------------------------------


def test_it_compensates_in_reverse_order_once_each_also_when_the_compensator_is_killed(d):
    run_id = start(
        d,
        "book_trip",
        json.dumps({"guest": "Ada", "card": "declined"}),
        "--hang-after-tool",
        "booking.release",
    )
    sigkill_when_hung(d, d.popen("worker", "--burst"), "booking.release")
    assert run_status(d, run_id) == "FAILED"

    burst_until(
        d, "compensation finished", lambda: status(d, run_id)["compensation"]["status"] == "REVIEW"
    )
    releases = [
        c["args"]["hold_id"] for c in device(d, "booking")["calls"] if c["op"] == "booking.release"
    ]
    assert releases == ["car-2", "room-1"]  # reverse order, once each despite the kill
    holds = device(d, "booking")["state"]["holds"]
    assert {h: (v["status"], v["releases"]) for h, v in holds.items()} == {
        "room-1": ("released", 1),
        "car-2": ("released", 1),
    }
    comp = status(d, run_id)["compensation"]
    assert [(e["step"], e["status"]) for e in comp["steps"]] == [
        ("notify_guest", "MANUAL_REVIEW"),
        ("hold_car", "COMPENSATED"),
        ("hold_room", "COMPENSATED"),
    ]
    assert [m["step"] for m in comp["manual_review"]] == ["notify_guest"]
    holds_ledger = db_rows(
        d,
        "SELECT status FROM runs_operation WHERE run_id = %s AND tool = %s",
        (db_id(d, run_id), "booking.hold"),
    )
    assert sorted(holds_ledger) == [("COMPENSATED",), ("COMPENSATED",)]
    assert run_status(d, run_id) == "FAILED"
