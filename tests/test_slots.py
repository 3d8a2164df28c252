"""Execution slots: one worker process runs many waiting steps at once, on PostgreSQL
with RQ and with database polling, and every fault stays per step: each step commits
once, a SIGKILL of a process holding 50 steps is recovered by liveness, SIGTERM drains
every slot, a cancel stops only its own step, and the process keeps to its pool of
connections and replaces those the server ended; on SQLite (the embedded default)
fifty slots commit each step once and drain on SIGTERM. Real PostgreSQL, SQLite, Redis
and worker subprocesses throughout; ``bench_wait`` steps wait for a gate file, so "in
flight" is a fact the test waits for, not a bet."""

import re
import signal
import threading
from pathlib import Path

import pytest
import redis

from agentops import db_pool
from runs.engine.execution.slots import Slots
from tests.support.deployment_runs import db_rows, shell_json
from tests.support.waiting import wait_until

IN_FLIGHT = 50


def _start_waiting_runs(d, n: int, gate: Path) -> list[str]:
    return shell_json(
        d,
        f"""
from runs.engine.control.lifecycle import start_run
ids = [str(start_run("bench_wait", thread_id=f"slots-{{i}}", input={{"gate": {str(gate)!r}}},
        actor="test").pk) for i in range({n})]
print(json.dumps(ids))
""",
    )


def _first_steps(d) -> list[tuple]:
    """``(status, attempt, owner)`` of every run's first step."""
    return db_rows(d, "SELECT status, attempt, owner FROM runs_step WHERE name = 'w1'")


def _running_first_steps(d, attempt: int = 1) -> list[tuple]:
    return [s for s in _first_steps(d) if s[0] == "RUNNING" and s[1] == attempt]


def _event_counts(d, type_: str) -> dict[str, int]:
    """How many events of ``type_`` each step name has, over all runs."""
    rows = db_rows(
        d,
        "SELECT s.name, count(*) FROM runs_event e JOIN runs_step s ON s.id = e.step_id "
        "WHERE e.type = %s GROUP BY s.name",
        (type_,),
    )
    return dict(rows)


def _run_statuses(d) -> list[str]:
    return [r[0] for r in db_rows(d, "SELECT status FROM runs_run")]


def _all_succeeded(d, n: int) -> bool:
    statuses = _run_statuses(d)
    return len(statuses) == n and set(statuses) == {"SUCCEEDED"}


@pytest.mark.parametrize("mode", ["rq", "db"])
def test_it_runs_fifty_waiting_steps_at_once_and_commits_each_once(
    deployment_factory, tmp_path, mode
):
    d = deployment_factory("postgres", {"AGENTOPS_POLL_SECONDS": 0.2})
    gate = tmp_path / "gate"
    _start_waiting_runs(d, IN_FLIGHT, gate)
    worker = d.popen("worker", "--mode", mode, "--concurrency", IN_FLIGHT)

    running = wait_until(
        lambda: len(r := _running_first_steps(d)) == IN_FLIGHT and r,
        what="all 50 first steps in flight at once",
        timeout=120,
    )
    assert len({owner for _, _, owner in running}) == 1
    if mode == "rq":
        # Each run was notified at its start and again by the worker's start-up
        # recovery. The first notification taken claimed every due step for the free
        # slots in one batch, and no notification is taken while no slot is free: the
        # others wait in the queue, not needed.
        queued = redis.Redis.from_url(d.env["REDIS_URL"]).llen("rq:queue:default")
        assert queued > IN_FLIGHT, queued
    gate.touch()
    wait_until(lambda: _all_succeeded(d, IN_FLIGHT), what="every run to succeed", timeout=120)

    assert _event_counts(d, "step.succeeded") == {"w1": IN_FLIGHT, "w2": IN_FLIGHT, "w3": 50}
    assert _event_counts(d, "step.started") == {"w1": IN_FLIGHT, "w2": IN_FLIGHT, "w3": 50}
    assert {r[0] for r in db_rows(d, "SELECT attempt FROM runs_step")} == {1}
    # Gap-free event seqs per run, however the steps were claimed (one by one or in a batch).
    seqs = db_rows(
        d,
        "SELECT r.event_seq, count(e.id), min(e.seq), max(e.seq) FROM runs_run r "
        "JOIN runs_event e ON e.run_id = r.id GROUP BY r.id",
    )
    assert len(seqs) == IN_FLIGHT
    assert all(n == count == last and first == 1 for n, count, first, last in seqs), seqs
    assert worker.poll() is None, d.logs(worker)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, d.logs(worker)
    assert f"stopped after {IN_FLIGHT * 3} step(s)" in d.logs(worker)[0]


@pytest.mark.parametrize("mode", ["rq", "db"])
def test_a_sigkilled_process_with_fifty_steps_is_recovered_by_liveness(
    deployment_factory, tmp_path, mode
):
    # A 10-minute lease: every step retaken well before it is liveness, not the lease.
    d = deployment_factory("postgres", {"AGENTOPS_LEASE_SECONDS": 600})
    gate = tmp_path / "gate"
    _start_waiting_runs(d, IN_FLIGHT, gate)
    doomed = d.popen("worker", "--mode", mode, "--concurrency", IN_FLIGHT)
    wait_until(
        lambda: len(_running_first_steps(d)) == IN_FLIGHT,
        what="all 50 first steps held by one process",
        timeout=120,
    )
    rescuer = d.popen("worker", "--mode", mode, "--concurrency", IN_FLIGHT)
    wait_until(
        lambda: db_rows(d, "SELECT count(*) FROM runs_workerprocess WHERE stopped_at IS NULL")[0][0]
        == 2,
        what="the second worker to register",
    )
    doomed.kill()
    doomed.wait(timeout=30)

    retaken = wait_until(
        lambda: len(r := _running_first_steps(d, attempt=2)) == IN_FLIGHT and r,
        what="every step retaken at attempt 2",
        timeout=120,
    )
    assert len({owner for _, _, owner in retaken}) == 1
    assert _event_counts(d, "lease.owner_dead") == {"w1": IN_FLIGHT}
    gate.touch()
    wait_until(lambda: _all_succeeded(d, IN_FLIGHT), what="every run to succeed", timeout=120)
    # The killed attempts never committed: each step succeeded exactly once.
    assert _event_counts(d, "step.succeeded") == {"w1": IN_FLIGHT, "w2": IN_FLIGHT, "w3": 50}
    assert not _event_counts(d, "step.commit_rejected")
    assert rescuer.poll() is None, d.logs(rescuer)


@pytest.mark.parametrize("mode", ["rq", "db"])
def test_sigterm_lets_every_slot_finish_and_save(deployment_factory, tmp_path, mode):
    d = deployment_factory("postgres", {"AGENTOPS_POLL_SECONDS": 0.2})
    gate = tmp_path / "gate"
    _start_waiting_runs(d, IN_FLIGHT, gate)
    worker = d.popen("worker", "--mode", mode, "--concurrency", IN_FLIGHT)
    wait_until(
        lambda: len(_running_first_steps(d)) == IN_FLIGHT, what="50 steps in flight", timeout=120
    )
    worker.send_signal(signal.SIGTERM)
    # The stop request is taken (the claim loop ended), then the steps may end.
    wait_until(lambda: "stopping: 50 slot(s) busy" in d.logs(worker)[0], what="the stop")
    gate.touch()
    assert worker.wait(timeout=120) == 0, d.logs(worker)

    assert _event_counts(d, "step.succeeded") == {"w1": IN_FLIGHT}
    # Its exit line counts the steps its slots finished after the stop.
    assert f"stopped after {IN_FLIGHT} step(s)" in d.logs(worker)[0]
    steps = db_rows(d, "SELECT name, status, attempt, lease_until FROM runs_step")
    w1 = [s for s in steps if s[0] == "w1"]
    assert {(s[1], s[2], s[3]) for s in w1} == {("SUCCEEDED", 1, None)}
    # The next steps were saved and handed back, not run and not held.
    w2 = [s for s in steps if s[0] == "w2"]
    assert len(w2) == IN_FLIGHT and {(s[1], s[3]) for s in w2} == {("PENDING", None)}
    assert len(db_rows(d, "SELECT 1 FROM runs_checkpoint WHERE name = 'after:w1'")) == IN_FLIGHT


def test_cancelling_one_of_fifty_stops_only_its_step(deployment_factory, tmp_path):
    d = deployment_factory("postgres", {"AGENTOPS_LEASE_SECONDS": 3})
    gate = tmp_path / "gate"
    run_ids = _start_waiting_runs(d, IN_FLIGHT, gate)
    worker = d.popen("worker", "--concurrency", IN_FLIGHT)
    wait_until(
        lambda: len(_running_first_steps(d)) == IN_FLIGHT, what="50 steps in flight", timeout=120
    )
    victim = run_ids[17]
    asked_at = db_rows(d, "SELECT now()")[0][0]
    d.call("runs", "cancel", victim, "--reason", "only this one")
    key = victim
    wait_until(
        lambda: db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (key,))[0][0]
        == "CANCELLED",
        what="the cancelled run to stop",
    )
    # Every other step is still in flight in its slot, on its first attempt, and the
    # heartbeat that told the victim's slot keeps renewing the others' leases.
    assert len(_running_first_steps(d)) == IN_FLIGHT - 1
    wait_until(
        lambda: db_rows(
            d,
            "SELECT count(*) FROM runs_step WHERE name = 'w1' AND status = 'RUNNING' "
            "AND heartbeat_at > %s",
            (asked_at,),
        )[0][0]
        == IN_FLIGHT - 1,
        what="the other leases renewed after the cancel",
    )
    assert _event_counts(d, "step.cancelled") == {"w1": 1}
    gate.touch()
    wait_until(
        lambda: _run_statuses(d).count("SUCCEEDED") == IN_FLIGHT - 1,
        what="the other runs to succeed",
        timeout=120,
    )
    assert _event_counts(d, "step.succeeded")["w1"] == IN_FLIGHT - 1
    cancelled = db_rows(d, "SELECT status, attempt FROM runs_step WHERE run_id = %s", (key,))
    assert cancelled == [("CANCELLED", 1)]
    assert worker.poll() is None, d.logs(worker)


def test_a_process_with_a_hundred_slots_keeps_to_its_pool(deployment_factory, tmp_path):
    pool = 3
    d = deployment_factory("postgres", {"AGENTOPS_WORKER_POOL_SIZE": pool})
    gate = tmp_path / "gate"
    _start_waiting_runs(d, 100, gate)
    worker = d.popen("worker", "--concurrency", 100)
    worker_id = wait_until(
        lambda: (m := re.search(r"worker (\S+) mode=", d.logs(worker)[0])) and m[1],
        what="the worker's start line",
    )
    peak = 0

    def connections() -> int:
        # The pooled connections and the liveness lock's both name the worker.
        return db_rows(
            d,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
            (f"%{worker_id}"[:63],),
        )[0][0]

    def all_in_flight() -> bool:
        nonlocal peak
        peak = max(peak, connections())
        return len(_running_first_steps(d)) == 100

    wait_until(all_in_flight, what="100 steps in flight", timeout=180, interval=0.05)
    gate.touch()

    def all_done() -> bool:
        nonlocal peak
        peak = max(peak, connections())
        return _all_succeeded(d, 100)

    wait_until(all_done, what="every run to succeed", timeout=180, interval=0.05)
    assert 1 < peak <= pool + 1, peak


REPLACE_ENDED = """
import threading
from django.db import connection
from agentops import db_pool
db_pool.use_pool(3, timeout=10, name="agentops-worker w-cut")
held = threading.Barrier(3)
def hold():
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
        held.wait(30)
    db_pool.release_connection()
threads = [threading.Thread(target=hold) for _ in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
# This thread draws one of the three; the two left idle in the pool are ended.
with connection.cursor() as cur:
    cur.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'agentops-worker w-cut' AND pid <> pg_backend_pid()")
    ended = cur.fetchone()[0]
db_pool.release_connection()
replaced = [db_pool.replace_ended(), db_pool.replace_ended()]
with connection.cursor() as cur:
    cur.execute("SELECT 1")
    works = cur.fetchone()[0]
print(json.dumps([ended, replaced, works]))
"""


def test_the_pool_replaces_the_connections_the_server_ended_while_idle(deployment_factory):
    # A process of its own: a worker's other threads would draw the ended connections
    # first (and reconnect), hiding whether the check found them.
    d = deployment_factory("postgres")
    ended, replaced, works = shell_json(d, REPLACE_ENDED, fresh=True)
    assert (ended, replaced, works) == (2, [2, 0], 1)


def test_a_workers_sessions_are_named_after_its_pgappname(monkeypatch):
    # A tool that finds a process's sessions by its PGAPPNAME finds the pooled and the
    # liveness ones too (the connection_cut drill ends them all that way).
    monkeypatch.delenv("PGAPPNAME", raising=False)
    assert db_pool.application_name("worker", "h:1:ab") == "agentops-worker h:1:ab"
    monkeypatch.setenv("PGAPPNAME", "billing")
    assert db_pool.application_name("liveness", "h:1:ab") == "billing agentops-liveness h:1:ab"
    assert db_pool.application_name("worker", "h" * 80, prefix="") == f"agentops-worker {'h' * 47}"


def test_an_error_in_one_slot_leaves_the_others_running():
    # The engine's own failure paths are covered above; this is what escapes them.
    release = threading.Event()
    done: list[int] = []

    def run(step_id: int, claimed: object) -> int:
        if step_id == 2:
            raise RuntimeError("engine bug in one slot")
        release.wait(30)
        done.append(step_id)
        return 1

    slots = Slots(3, run)
    for step_id in (1, 2, 3):
        slots.submit(step_id)
    wait_until(lambda: slots.busy() == 2, what="the failing slot to free itself")
    assert slots.pending == {1, 3}
    release.set()
    assert slots.drain(timeout=30)
    slots.shutdown()
    assert sorted(done) == [1, 3] and slots.free() == 3


def test_fifty_slots_on_sqlite_commit_each_step_once_and_drain_on_sigterm(
    deployment_factory, tmp_path
):
    # The embedded default: one SQLite file (one writer at a time), database polling.
    d = deployment_factory("sqlite", {"AGENTOPS_POLL_SECONDS": 0.2})
    gate = tmp_path / "gate"
    _start_waiting_runs(d, IN_FLIGHT, gate)
    first = d.popen("worker", "--concurrency", IN_FLIGHT)
    running = wait_until(
        lambda: len(r := _running_first_steps(d)) == IN_FLIGHT and r,
        what="all 50 first steps in flight in one SQLite process",
        timeout=120,
    )
    assert len({owner for _, _, owner in running}) == 1
    first.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping: 50 slot(s) busy" in d.logs(first)[0], what="the stop")
    gate.touch()
    assert first.wait(timeout=120) == 0, d.logs(first)
    # Every slot finished and saved its step; the chained next steps were handed back.
    assert _event_counts(d, "step.succeeded") == {"w1": IN_FLIGHT}
    w2 = db_rows(d, "SELECT status, lease_until FROM runs_step WHERE name = 'w2'")
    assert w2 == [("PENDING", None)] * IN_FLIGHT

    second = d.popen("worker", "--concurrency", IN_FLIGHT)
    wait_until(lambda: _all_succeeded(d, IN_FLIGHT), what="every run to succeed", timeout=120)
    assert _event_counts(d, "step.succeeded") == {"w1": IN_FLIGHT, "w2": IN_FLIGHT, "w3": 50}
    assert _event_counts(d, "step.started") == {"w1": IN_FLIGHT, "w2": IN_FLIGHT, "w3": 50}
    assert {r[0] for r in db_rows(d, "SELECT attempt FROM runs_step")} == {1}
    assert not _event_counts(d, "step.commit_rejected")
    assert second.poll() is None, d.logs(second)
