"""Worker liveness: a killed worker's step is re-claimed on the database's word (its
session advisory lock released, or its pid gone on SQLite), not after its lease; a
stopped worker keeps its lock and is recovered by the lease; a lock that does not hold
on the worker's own session turns liveness off. Real worker subprocesses throughout."""

import signal

import pytest

from tests.support.deployment_runs import attempt_facts, db_rows, events_of, facts, shell_json
from tests.support.liveness import SIGNAL, hold_step, live_signals, start_hold, wait_locks_released
from tests.support.services import BACKENDS
from tests.support.waiting import wait_until


def _holder(d, run_id: str, workers: list) -> object:
    """The worker process that holds the run's ``hold`` step at attempt 1."""
    step = wait_until(
        lambda: (s := hold_step(d, run_id)) and s[0] == "RUNNING" and s[1] == 1 and s,
        what="a worker to claim the hold step",
        timeout=120,
    )
    pid = int(step[2].split(":")[-2])
    return next(w for w in workers if w.pid == pid)


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_retakes_a_killed_workers_step_on_the_liveness_signal(deployment_factory, backend):
    # The default 30 s lease: the step must not wait for it.
    d = deployment_factory(backend, {"AGENTOPS_POLL_SECONDS": 0.2})
    run_id = start_hold(d, "K")
    workers = [d.popen("worker"), d.popen("worker")]
    wait_until(
        lambda: live_signals(d) == [SIGNAL[backend]] * 2, what="both workers to publish liveness"
    )
    holder = _holder(d, run_id, workers)
    holder.kill()
    holder.wait(timeout=30)

    wait_until(lambda: hold_step(d, run_id)[0] == "SUCCEEDED", what="the step to commit")
    info = facts(d, run_id)
    assert info["run"]["status"] == "SUCCEEDED"
    (released,) = events_of(info, "lease.owner_dead")
    assert released["payload"]["attempt"] == 1
    assert released["payload"]["signal"] == SIGNAL[backend]
    assert int(released["payload"]["owner"].split(":")[-2]) == holder.pid
    assert events_of(info, "lease.expired") == []
    started = events_of(info, "step.started")
    assert [e["payload"]["attempt"] for e in started] == [1, 2]
    rescuer = next(w for w in workers if w is not holder)
    assert int(started[1]["payload"]["worker"].split(":")[-2]) == rescuer.pid
    (hold,) = info["steps"]
    assert (hold["status"], hold["attempt"], hold["output"]) == ("SUCCEEDED", 2, {"attempt": 2})
    assert rescuer.poll() is None
    # The API and the run page say what became of attempt 1: lost with its worker, and
    # who took over; the timeline no longer draws it running across the whole run.
    shown = attempt_facts(d, run_id)
    lost, rescued = shown["api"]["hold"]
    assert (lost["result"], lost["outcome"]) == ("lost", "lease.owner_dead")
    assert (lost["worker"], lost["taken_over_by"]) == (
        released["payload"]["owner"],
        started[1]["payload"]["worker"],
    )
    assert lost["ended_at"] is not None
    assert (rescued["result"], rescued["outcome"]) == ("succeeded", "step.succeeded")
    assert shown["bars"]["hold"] == ["interrupted", "succeeded"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_runs_resume_hands_back_a_killed_workers_step_without_waiting_for_its_lease(
    deployment_factory, backend
):
    # One worker only and the default 30 s lease: no peer's liveness thread can release
    # the step, so ``runs resume`` must ask liveness itself instead of waiting.
    d = deployment_factory(backend, {"AGENTOPS_POLL_SECONDS": 0.2})
    run_id = start_hold(d, "K1")
    worker = d.popen("worker")
    wait_until(lambda: live_signals(d) == [SIGNAL[backend]], what="the worker to publish liveness")
    holder = _holder(d, run_id, [worker])
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    if backend == "postgres":
        wait_locks_released(d)
    assert hold_step(d, run_id)[0] == "RUNNING"

    # ``--wait 0`` fails with lease_live if the command would wait for the lease.
    resumed = d.manage("runs", "resume", "--thread", "K1", "--wait", "0", check=True)
    assert "waiting for the lease" not in resumed.stdout
    assert "next step hold" in resumed.stdout
    assert hold_step(d, run_id)[:2] == ("PENDING", 1)

    d.manage("worker", "--burst", check=True, timeout=120)
    info = facts(d, run_id)
    assert info["run"]["status"] == "SUCCEEDED"
    (released,) = events_of(info, "lease.owner_dead")
    assert (released["payload"]["signal"], released["actor"]) == (SIGNAL[backend], "cli")
    assert int(released["payload"]["owner"].split(":")[-2]) == holder.pid
    assert events_of(info, "lease.expired") == []
    assert len(events_of(info, "run.resume_requested")) == 1
    (hold,) = info["steps"]
    assert (hold["status"], hold["attempt"], hold["output"]) == ("SUCCEEDED", 2, {"attempt": 2})


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stopped_worker_keeps_its_signal_and_is_recovered_by_the_lease(
    deployment_factory, backend
):
    d = deployment_factory(
        backend,
        {"AGENTOPS_LEASE_SECONDS": 3, "AGENTOPS_SWEEP_SECONDS": 0.5, "AGENTOPS_POLL_SECONDS": 0.2},
    )
    run_id = start_hold(d, "S")
    workers = [d.popen("worker"), d.popen("worker")]
    wait_until(lambda: len(live_signals(d)) == 2, what="both workers to register")
    holder = _holder(d, run_id, workers)
    holder.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: hold_step(d, run_id)[0] == "SUCCEEDED", what="the lease to hand it over")
    finally:
        holder.send_signal(signal.SIGCONT)
    info = facts(d, run_id)
    assert info["run"]["status"] == "SUCCEEDED"
    assert events_of(info, "lease.owner_dead") == []
    # Taken over by the lease: the sweeper released it, or a polling worker claimed the
    # expired lease directly.
    expired = [e["payload"]["attempt"] for e in events_of(info, "lease.expired")]
    started = events_of(info, "step.started")
    assert [e["payload"]["attempt"] for e in started] == [1, 2]
    assert expired == [1] or started[1]["payload"].get("reclaimed_from") == started[0]["actor"]
    (hold,) = info["steps"]
    assert (hold["status"], hold["attempt"]) == ("SUCCEEDED", 2)
    # The stopped worker wakes up, finds its lease gone and abandons its attempt.
    wait_until(
        lambda: events_of(facts(d, run_id), "step.abandoned"), what="the late attempt to stop"
    )
    assert holder.poll() is None


POOLED = """
import json, psycopg
from django.db import connection
from runs.engine.execution.liveness import LOCK_NAMESPACE, Liveness
from runs.models import WorkerProcess
wp = WorkerProcess.objects.create(worker_id="w-pooled", host="h", pid=1, mode="db")
# Another session holds the key, as a pooled server session left holding it would.
other = psycopg.connect(**{k: v for k, v in connection.get_connection_params().items()
                          if k not in ("cursor_factory", "context", "prepare_threshold")})
other.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_NAMESPACE, wp.pk))
live = Liveness(wp.pk, wp.worker_id)
kind = live.start()
live.stop()
wp.refresh_from_db()
print(json.dumps([kind, wp.liveness, live.keeper.pooled]))
"""

CUT = """
import json, psycopg
from django.db import connection
from runs.engine.control.lifecycle import start_run
from runs.engine.execution.liveness import LOCK_NAMESPACE, LockKeeper, dead_owner_steps
from runs.models import Step, WorkerProcess
from tests.support.liveness import SIGNAL, hold_step, live_signals, start_hold, wait_locks_released
from tests.support.waiting import wait_until
def lock_gone():
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s::oid "
                    "AND objid = %s::oid", (LOCK_NAMESPACE, wp.pk))
        return cur.fetchone() is None
wp = WorkerProcess.objects.create(worker_id="w-cut", host="h", pid=1, mode="db", liveness="pg")
run = start_run("bench_hold", thread_id="cut", input={})
Step.objects.create(run=run, name="hold", seq=99, status="RUNNING", attempt=1, owner="w-cut")
keeper = LockKeeper(wp.pk, wp.worker_id)
seen = [keeper.acquire(), len(dead_owner_steps(10))]
with connection.cursor() as cur:
    cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'agentops-liveness w-cut%%'")
wait_until(lock_gone, what="the cut session's lock to go", timeout=30, interval=0.05)
seen.append(len(dead_owner_steps(10)))
seen += [keeper.renew(), len(dead_owner_steps(10))]
keeper.close()
wait_until(lock_gone, what="the closed session's lock to go", timeout=30, interval=0.05)
seen.append(len(dead_owner_steps(10)))
print(json.dumps(seen))
"""

RESTART = """
import json
from datetime import datetime, timezone
from django.conf import settings
from runs.engine.control.lifecycle import start_run
from runs.engine.execution.liveness import dead_owner_steps
from runs.models import Step, WorkerProcess
# Neither holds its lock: one started before the server did (its lock went with the
# restart), one after (its lock went with its session).
WorkerProcess.objects.create(worker_id="w-old", host="h", pid=1, mode="db", liveness="pg",
                             started_at=datetime(2000, 1, 1, tzinfo=timezone.utc))
WorkerProcess.objects.create(worker_id="w-new", host="h", pid=2, mode="db", liveness="pg")
run = start_run("bench_hold", thread_id="restart", input={})
for seq, owner in ((98, "w-old"), (99, "w-new")):
    Step.objects.create(run=run, name=f"hold{seq}", seq=seq, status="RUNNING", attempt=1,
                        owner=owner)
seen = []
for grace in (3600, 0):
    settings.AGENTOPS_LIVENESS_GRACE_SECONDS = grace
    seen.append(sorted(row[3] for row in dead_owner_steps(10)))
print(json.dumps(seen))
"""


def test_a_server_restart_judges_older_workers_by_their_lease_for_the_grace(
    deployment_factory,
):
    d = deployment_factory("postgres")
    within_grace, after_grace = shell_json(d, RESTART, fresh=True)
    assert within_grace == ["w-new"]
    assert after_grace == ["w-new", "w-old"]


def test_it_turns_liveness_off_when_the_lock_does_not_hold_on_its_session(deployment_factory):
    d = deployment_factory("postgres")
    kind, published, pooled = shell_json(d, POOLED, fresh=True)
    assert (kind, published, pooled) == ("", "", True)


def test_a_cut_lock_connection_shows_the_owner_dead_until_it_is_taken_again(deployment_factory):
    d = deployment_factory("postgres")
    acquired, before, cut, renewed, after, closed = shell_json(d, CUT, fresh=True)
    assert (acquired, before) == (True, 0)
    assert cut == 1
    assert (renewed, after) == (True, 0)
    assert closed == 1


def test_a_worker_with_liveness_off_publishes_no_signal(deployment_factory):
    d = deployment_factory("sqlite", {"AGENTOPS_LIVENESS": "false"})
    out = d.manage("worker", "--burst", timeout=120, check=True)
    assert "Traceback" not in out.stderr
    assert db_rows(d, "SELECT liveness FROM runs_workerprocess") == [("",)]
