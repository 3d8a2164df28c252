"""Schedules: one run per tick whatever the number of workers and sweepers, the overlap
policy while a run waits, catch-up after downtime by policy, and the CLI's refusals.
Real worker and sweeper processes on PostgreSQL + Redis."""

import json
from datetime import timedelta
from itertools import pairwise

import pytest

from tests.support.deployment_runs import db_rows, shell_json
from tests.support.waiting import wait_until

ORDER = json.dumps({"order": "A-1", "delay_s": 0})


def db_now(d):
    return db_rows(d, "SELECT statement_timestamp()")[0][0]


def ticks(d, name: str) -> list[tuple]:
    """``(tick_at, outcome, run_id)`` of the schedule's ticks, oldest first."""
    return db_rows(
        d,
        "SELECT t.tick_at, t.outcome, t.run_id FROM runs_scheduletick t "
        "JOIN runs_schedule s ON s.id = t.schedule_id WHERE s.name = %s ORDER BY t.tick_at",
        (name,),
    )


def since_first_run(rows: list[tuple]) -> list[tuple]:
    """The ticks from the first that started a run: a tick that fell due while the
    processes were still starting is missed, as the catch-up policy says."""
    first = next(i for i, t in enumerate(rows) if t[1] == "started")
    assert all(t[1] == "missed" for t in rows[:first]), rows
    return rows[first:]


def test_every_2_with_two_workers_and_two_sweepers_makes_one_run_per_tick(deployment_factory):
    d = deployment_factory("postgres", {"AGENTOPS_SWEEP_SECONDS": 0.5})
    d.manage(
        "schedules", "add", "noop", "--workflow", "bench_noop", "--every", "2",
        "--overlap", "allow", check=True,
    )  # fmt: skip
    procs = [d.popen("worker") for _ in range(2)] + [d.popen("sweeper") for _ in range(2)]
    first = wait_until(
        lambda: [t for t in ticks(d, "noop") if t[1] == "started"], what="the first run"
    )[0][0]
    start = first + timedelta(seconds=2)
    end = start + timedelta(seconds=10)
    # Ten seconds of ticks, and their handling (the grace for a late sweep) after them.
    wait_until(lambda: db_now(d) > end + timedelta(seconds=6), timeout=120, what="10 s of ticks")
    window = [t for t in ticks(d, "noop") if start <= t[0] < end]
    for proc in procs:
        proc.kill()
    assert len(window) == 5, window
    assert [t[1] for t in window] == ["started"] * 5
    assert [(b[0] - a[0]).total_seconds() for a, b in pairwise(window)] == [2.0] * 4
    every = since_first_run(ticks(d, "noop"))
    started = [t[2] for t in every if t[1] == "started"]
    assert len(set(started)) == len(started) == len(every)
    runs = db_rows(d, "SELECT count(*) FROM runs_run WHERE workflow = 'bench_noop'")[0][0]
    assert runs == len(every)


def test_overlap_skip_starts_nothing_while_the_previous_run_waits(deployment_factory):
    d = deployment_factory("postgres", {"AGENTOPS_SWEEP_SECONDS": 0.5})
    d.manage(
        "schedules", "add", "orders", "--workflow", "order_followup", "--every", "2",
        "--input", ORDER, "--overlap", "skip", check=True,
    )  # fmt: skip
    worker = d.popen("worker")
    sweeper = d.popen("sweeper")
    wait_until(
        lambda: [t for t in ticks(d, "orders") if t[1] == "skipped"][2:],
        timeout=120,
        what="three skipped ticks",
    )
    sweeper.kill()
    rows = since_first_run(ticks(d, "orders"))
    started = [t for t in rows if t[1] == "started"]
    assert len(started) == 1 and [t[1] for t in rows[1:]] == ["skipped"] * (len(rows) - 1)
    run_id = str(started[0][2])
    assert db_rows(d, "SELECT count(*) FROM runs_run")[0][0] == 1
    wait_until(
        lambda: db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (run_id,))[0][0]
        == "WAITING_EXTERNAL",
        what="the run waits for its payment",
    )

    # Once the run is paid and done, the next tick starts a new one.
    d.call("runs", "signal", run_id, "payment", "--payload", '{"amount": 5}')
    wait_until(
        lambda: db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (run_id,))[0][0]
        == "SUCCEEDED",
        what="the paid run to finish",
    )
    sweeper = d.popen("sweeper")
    wait_until(
        lambda: [t for t in ticks(d, "orders") if t[1] == "started"][1:],
        timeout=120,
        what="a second run",
    )
    for proc in (worker, sweeper):
        proc.kill()


@pytest.mark.parametrize("policy", ["none", "latest", "all"])
def test_catch_up_after_10_s_of_downtime_follows_the_policy(deployment_factory, policy):
    d = deployment_factory("postgres", {"AGENTOPS_SCHEDULE_GRACE_SECONDS": 1})
    d.manage(
        "schedules", "add", "s", "--workflow", "bench_noop", "--every", "2",
        "--overlap", "allow", "--catchup", policy, check=True,
    )  # fmt: skip
    # As if every sweeper had been down for the last 12 s: the next tick is 12 s ago.
    moved = shell_json(
        d,
        """
from datetime import timedelta
from itertools import pairwise
from runs.engine.state.clock import db_now
from runs.models import Schedule
now = db_now()
due = now.replace(microsecond=0) - timedelta(seconds=12 + now.second % 2)
print(json.dumps(Schedule.objects.filter(name="s").update(next_fire_at=due)))
""",
    )
    assert moved == 1
    d.manage("sweeper", "--once", check=True, timeout=120)

    rows = ticks(d, "s")
    outcomes = [t[1] for t in rows]
    assert len(rows) >= 6, rows
    assert [(b[0] - a[0]).total_seconds() for a, b in pairwise(rows)] == [2.0] * (len(rows) - 1)
    if policy == "all":
        assert outcomes == ["started"] * len(rows)
    elif policy == "latest":
        # The newest tick starts (late or, if the sweep met it in time, on time).
        assert outcomes == ["missed"] * (len(rows) - 1) + ["started"]
    else:
        # Nothing late starts; only the newest could have been on time.
        assert outcomes[:-1] == ["missed"] * (len(rows) - 1)
        assert outcomes[-1] in ("missed", "started")
    started = db_rows(d, "SELECT count(*) FROM runs_run")[0][0]
    assert started == outcomes.count("started")


def test_the_cli_refuses_bad_schedules_and_lists_pauses_triggers_and_deletes(deployment_factory):
    d = deployment_factory("sqlite")
    for argv, code in (
        (("--workflow", "nope", "--every", "2"), "[unknown_workflow]"),
        (("--workflow", "bench_noop", "--cron", "61 * * * *"), "[invalid_input]"),
        (
            ("--workflow", "bench_noop", "--cron", "0 9 * * 1", "--tz", "Mars/Base"),
            "[invalid_input]",
        ),
        (("--workflow", "order_followup", "--every", "5", "--input", "{}"), "[invalid_input]"),
    ):
        refused = d.manage("schedules", "add", "x", *argv, check=False)
        assert refused.returncode != 0 and code in refused.stderr, (argv, refused.stderr)
    usage = d.manage(
        "schedules", "add", "x", "--workflow", "bench_noop", "--every", "0", check=False
    )
    assert usage.returncode == 2
    assert d.manage_json("schedules", "list", "--json") == []

    d.manage(
        "schedules", "add", "weekly", "--workflow", "bench_noop", "--cron", "0 9 * * 1",
        "--tz", "Europe/Paris", check=True,
    )  # fmt: skip
    again = d.manage("schedules", "add", "weekly", "--workflow", "bench_noop", "--every", "9",
                     check=False)  # fmt: skip
    assert again.returncode != 0 and "[schedule_exists]" in again.stderr
    (row,) = d.manage_json("schedules", "list", "--json")
    assert row["timing"] == "0 9 * * 1 (Europe/Paris)" and len(row["next_fire_times"]) == 3
    # 09:00 in Paris is 07:00 or 08:00 UTC, on a Monday.
    assert all(t[11:13] in ("07", "08") for t in row["next_fire_times"])

    assert "paused" in d.manage("schedules", "pause", "weekly", check=True).stdout
    assert d.manage_json("schedules", "list", "--json")[0]["next_fire_times"] == []
    triggered = d.manage("schedules", "trigger", "weekly", check=True).stdout
    assert "started run" in triggered
    assert "resumed" in d.manage("schedules", "resume", "weekly", check=True).stdout
    assert d.manage_json("schedules", "list", "--json")[0]["last_ticks"][0]["manual"] is True
    assert "deleted" in d.manage("schedules", "delete", "weekly", check=True).stdout
    gone = d.manage("schedules", "pause", "weekly", check=False)
    assert gone.returncode != 0 and "[unknown_schedule]" in gone.stderr
    assert db_rows(d, "SELECT count(*) FROM runs_run")[0][0] == 1
