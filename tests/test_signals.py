"""Signals: a run of order_followup waits for ``payment`` with no worker and no lease;
a delivery (CLI) moves it once per request id, a signal sent before the wait is kept
and taken by it, a bad payload changes nothing, a finished run refuses signals, and a
wait past its deadline takes its timeout route. Real worker and sweeper processes on
SQLite (database polling) and PostgreSQL + Redis (RQ)."""

import json

import pytest

from tests.support.deployment_runs import db_rows, events_of, facts, run_status, shell_json
from tests.support.services import BACKENDS


def start(d, thread="order-1", delay_s=0) -> str:
    argv = ("runs", "start", "order_followup", "--thread", thread)
    return d.call(*argv, "--input", json.dumps({"order": thread, "delay_s": delay_s})).strip()


def signal(d, run_id, *args, check=True):
    return d.manage("runs", "signal", run_id, "payment", *args, check=check, timeout=120)


def counts(d, run_id) -> dict:
    """How many events, signals and steps the run has (what must not change)."""
    return shell_json(
        d,
        f"""
from runs.models import Event, Signal, Step
print(json.dumps({{"events": Event.objects.filter(run_id={run_id!r}).count(),
    "signals": Signal.objects.filter(run_id={run_id!r}).count(),
    "steps": Step.objects.filter(run_id={run_id!r}).count()}}))
""",
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_waits_without_a_worker_and_one_request_id_moves_the_run_once(
    deployment_factory, backend
):
    d = deployment_factory(backend)
    run_id = start(d)
    d.manage("worker", "--burst", timeout=180, check=True)

    info = facts(d, run_id)
    assert info["run"]["status"] == "WAITING_EXTERNAL"
    waiting = [s for s in info["steps"] if s["name"] == "await_payment"]
    assert [(s["status"], s["owner"], s["lease_until"]) for s in waiting] == [("WAITING", "", None)]
    assert events_of(info, "step.waiting")[-1]["payload"]["signal"] == "payment"
    # Nobody works while the run waits.
    assert "ENTER" not in d.manage("worker", "--burst", timeout=120, check=True).stdout

    before = counts(d, run_id)
    for bad in ('{"amount": 0}', '{"amount": "5"}', "{}", "[1]"):
        refused = signal(d, run_id, "--payload", bad, check=False)
        assert refused.returncode != 0 and "[invalid_input]" in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    assert counts(d, run_id) == before
    assert run_status(d, run_id) == "WAITING_EXTERNAL"

    first = signal(d, run_id, "--payload", '{"amount": 12.5}', "--request-id", "pay-1")
    again = signal(d, run_id, "--payload", '{"amount": 12.5}', "--request-id", "pay-1")
    assert "taken by the waiting step" in first.stdout
    assert "delivered before with this request id" in again.stdout
    other = signal(d, run_id, "--payload", '{"amount": 99}', "--request-id", "pay-1", check=False)
    assert other.returncode != 0 and "[signal_conflict]" in other.stderr

    d.manage("worker", "--burst", timeout=180, check=True)
    info = facts(d, run_id)
    assert info["run"]["status"] == "SUCCEEDED"
    assert len(events_of(info, "signal.received")) == 1
    assert len(events_of(info, "signal.consumed")) == 1
    assert [s["name"] for s in info["steps"]] == [
        "ask_payment",
        "await_payment",
        "schedule_followup",
        "reply",
    ]
    assert events_of(info, "signal.received")[0]["payload"]["payload"] == {"amount": 12.5}
    followup = next(s for s in info["steps"] if s["name"] == "schedule_followup")
    assert followup["output"]["amount"] == 12.5

    late = signal(d, run_id, "--payload", '{"amount": 1}', check=False)
    assert late.returncode != 0 and "[run_terminal]" in late.stderr
    assert counts(d, run_id)["signals"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_keeps_a_signal_sent_before_the_wait_and_the_wait_takes_it(deployment_factory, backend):
    d = deployment_factory(backend)
    run_id = start(d)
    early = signal(d, run_id, "--payload", '{"amount": 3}', "--request-id", "early")
    assert "kept until the run waits for it" in early.stdout
    assert run_status(d, run_id) == "PENDING"

    d.manage("worker", "--burst", timeout=180, check=True)
    info = facts(d, run_id)
    assert info["run"]["status"] == "SUCCEEDED"
    assert not events_of(info, "step.waiting")
    assert [e["payload"]["request_id"] for e in events_of(info, "signal.consumed")] == ["early"]
    assert next(s for s in info["steps"] if s["name"] == "schedule_followup")["output"] == {
        "amount": 3,
        "sleep_s": 0,
    }


def test_an_unknown_signal_name_is_refused_naming_the_known_ones(deployment_factory):
    d = deployment_factory("sqlite")
    run_id = start(d)
    refused = d.manage("runs", "signal", run_id, "paymnet", check=False)
    assert refused.returncode != 0
    assert "[unknown_signal]" in refused.stderr and "payment" in refused.stderr
    assert counts(d, run_id)["signals"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_wait_past_its_deadline_reminds_once_then_closes_the_order(deployment_factory, backend):
    d = deployment_factory(backend)
    run_id = start(d)
    d.manage("worker", "--burst", timeout=180, check=True)
    key = run_id.replace("-", "") if backend == "sqlite" else run_id

    def pass_the_deadline():
        # As if the hour had gone by: the wait's deadline moves into the past.
        sql = "UPDATE runs_step SET wait_until = %s WHERE run_id = %s AND status = 'WAITING'"
        stamp = "2000-01-01 00:00:00" if backend == "sqlite" else "2000-01-01T00:00:00Z"
        if backend == "sqlite":
            import sqlite3

            conn = sqlite3.connect(d.env["AGENTOPS_SQLITE_PATH"], timeout=30)
            with conn:
                assert conn.execute(sql.replace("%s", "?"), (stamp, key)).rowcount == 1
            conn.close()
        else:
            import psycopg

            with psycopg.connect(d.database_url) as conn:
                assert conn.execute(sql, (stamp, key)).rowcount == 1

    pass_the_deadline()
    swept = d.manage("sweeper", "--once", timeout=120, check=True)
    assert "'signal_waits_timed_out': 1" in swept.stdout
    d.manage("worker", "--burst", timeout=180, check=True)
    assert run_status(d, run_id) == "WAITING_EXTERNAL"

    # The next deadline is met by a delivery: the wait times out first, the signal is
    # kept, and the order is closed (its reminder was sent already) with the signal left.
    pass_the_deadline()
    late = signal(d, run_id, "--payload", '{"amount": 4}')
    assert "kept until the run waits for it" in late.stdout
    d.manage("worker", "--burst", timeout=180, check=True)
    info = facts(d, run_id)
    assert info["run"]["status"] == "SUCCEEDED"
    assert [s["name"] for s in info["steps"]] == [
        "ask_payment",
        "await_payment",
        "remind",
        "await_payment",
        "remind",
    ]
    assert len(events_of(info, "signal.timed_out")) == 2
    contents = [
        m[0]
        for m in db_rows(
            d,
            "SELECT content FROM runs_message WHERE run_id = %s ORDER BY seq",
            (key,),
        )
    ]
    assert any("a reminder" in c for c in contents) and "no payment; order closed" in contents[-1]
