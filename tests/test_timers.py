"""Durable timers: order_followup sleeps ``delay_s`` between its payment and its reply
with no lease and no worker held; SIGKILL of every worker and the sweeper during the
sleep loses nothing, and the step after it runs once, not before its time. Real
processes on SQLite (database polling) and PostgreSQL + Redis (RQ)."""

import json
import os
import signal

import pytest

from tests.support.deployment_runs import db_rows, events_of, facts
from tests.support.services import BACKENDS
from tests.support.waiting import wait_until


def reply_row(d, key: str):
    """``(status, attempt, not_before, started_at, owner)`` of the run's reply step."""
    rows = db_rows(
        d,
        "SELECT status, attempt, not_before, started_at, owner FROM runs_step "
        "WHERE run_id = %s AND name = 'reply'",
        (key,),
    )
    return rows[0] if rows else None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_timer_survives_sigkill_of_every_worker_and_the_sweeper(deployment_factory, backend):
    d = deployment_factory(backend, {"AGENTOPS_SWEEP_SECONDS": 0.5})
    procs = [d.popen("worker"), d.popen("worker"), d.popen("sweeper")]
    run_id = d.call(
        "runs", "start", "order_followup", "--thread", "t1",
        "--input", json.dumps({"order": "t1", "delay_s": 12}),
    ).strip()  # fmt: skip
    key = run_id.replace("-", "") if backend == "sqlite" else run_id
    wait_until(
        lambda: db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (key,))[0][0]
        == "WAITING_EXTERNAL",
        what="the payment wait",
    )
    d.call("runs", "signal", run_id, "payment", "--payload", '{"amount": 7}')
    asleep = wait_until(lambda: reply_row(d, key), what="the reply step held back")
    assert asleep[0] == "PENDING" and asleep[1] == 0 and asleep[4] == ""

    for proc in procs:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    # Nothing ran it while everything was dead, and nothing holds it.
    assert reply_row(d, key)[:2] == ("PENDING", 0)
    assert db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (key,))[0][0] == "RUNNING"

    procs = [d.popen("worker"), d.popen("sweeper")]
    wait_until(
        lambda: db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (key,))[0][0]
        == "SUCCEEDED",
        timeout=120,
        what="the run to finish after its sleep",
    )
    for proc in procs:
        proc.kill()
    status, attempt, not_before, started_at, _owner = reply_row(d, key)
    assert (status, attempt) == ("SUCCEEDED", 1)
    assert started_at >= not_before
    info = facts(d, run_id)
    reply_id = next(s["pk"] for s in info["steps"] if s["name"] == "reply")
    assert [e for e in events_of(info, "step.started") if e["step_id"] == reply_id][1:] == []
    scheduled = [e for e in events_of(info, "step.scheduled") if e["step_id"] == reply_id]
    assert len(scheduled) == 1 and "not_before" in scheduled[0]["payload"]
    assert info["run"]["stuck_since"] is None


def test_a_sleeping_run_can_be_paused_resumed_and_cancelled(deployment_factory):
    d = deployment_factory("sqlite")
    run_id = d.call(
        "runs", "start", "order_followup", "--thread", "t2",
        "--input", json.dumps({"order": "t2", "delay_s": 3600}),
    ).strip()  # fmt: skip
    d.call("runs", "signal", run_id, "payment", "--payload", '{"amount": 1}')
    d.manage("worker", "--burst", check=True, timeout=180)
    key = run_id.replace("-", "")
    assert reply_row(d, key)[:2] == ("PENDING", 0)
    # A worker pass leaves it asleep.
    assert "ENTER reply" not in d.manage("worker", "--burst", check=True, timeout=180).stdout

    d.call("runs", "pause", run_id, "--reason", "check the order")
    assert db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (key,))[0][0] == "PAUSED"
    (takeover,) = db_rows(d, "SELECT id FROM approvals_takeover WHERE run_id = %s", (key,))
    d.call("approvals", "resolve", takeover[0], "resume", "--reason", "fine")
    assert db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (key,))[0][0] == "RUNNING"
    assert reply_row(d, key)[:2] == ("PENDING", 0)
    assert "ENTER reply" not in d.manage("worker", "--burst", check=True, timeout=180).stdout

    d.call("runs", "cancel", run_id, "--reason", "customer left")
    assert db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (key,))[0][0] == "CANCELLED"
    assert reply_row(d, key)[0] == "CANCELLED"
