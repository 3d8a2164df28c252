"""A database that restarts or terminates sessions under a running step is an
infrastructure fault: the finished work is committed (the commit reconnects and retries
behind the fence), the lost connection is recorded, and the run never fails for it.
Real PostgreSQL servers and worker processes."""

import re
import time

import psycopg
import pytest
from django.db import connection

from lab.drills.base import wait_terminal
from lab.drills.sandbox import PgCluster, Sandbox
from runs.engine.control.lifecycle import start_run
from runs.engine.state import db_faults
from runs.models import Event, Step
from runs.states import RunStatus
from tests.support.deployment_runs import db_rows, facts, start_with_command, status, step_status
from tests.support.services import require_services
from tests.support.waiting import wait_until

pytestmark = pytest.mark.services

ENV = {
    "AGENTOPS_LEASE_SECONDS": "10",
    "AGENTOPS_POLL_SECONDS": "0.2",
    "AGENTOPS_SWEEP_SECONDS": "0.5",
    "AGENTOPS_EXTRA_WORKFLOW_MODULES": "tests.workflows.faulty",
    # One step at a time: the restart must meet the one commit these tests watch.
    "AGENTOPS_WORKER_CONCURRENCY": "1",
}


def test_a_restart_during_a_step_keeps_its_finished_work(django_db_blocker):
    require_services()
    cluster = PgCluster().init()
    try:
        with django_db_blocker.unblock(), Sandbox("restart", env=ENV, server=cluster.server) as box:
            run = start_run("faulty", thread_id="restart", input={"case": "sleep", "seconds": "6"})
            box.start_worker(mode="db")
            # The worker announces the step's code (``ENTER produce``) once its claim,
            # checkpoint and heartbeat are done: the restart then comes while the code
            # runs, and only the commit can meet it.
            wait_until(
                lambda: "ENTER produce" in box.log(box.workers[0]),
                what="produce's code to run",
                timeout=60,
                interval=0.05,
            )
            connection.close()
            cluster.stop("fast")  # pg_ctl restart -m fast
            cluster.start()
            statuses = wait_terminal([run.pk], 120)
            produce = Step.objects.get(run=run, name="produce")
            lost = list(Event.objects.filter(run=run, type="db.connection_lost"))
            log = box.log(box.workers[0])
        assert statuses[run.pk] == RunStatus.SUCCEEDED, log
        assert produce.attempt == 1, log  # committed by the attempt that did the work
        assert lost and lost[0].payload["during"] == "commit", log
    finally:
        cluster.destroy()


def test_terminated_sessions_while_a_reply_streams_never_fail_the_run(deployment_factory):
    d = deployment_factory(
        "postgres", {**{k: v for k, v in ENV.items()}, "AGENTOPS_SIM_WORD_SECONDS": "0.3"}
    )
    run_id = start_with_command(
        d, "room_temperature", "kill", '{"question": "How warm is the living room?"}'
    )
    worker = d.popen("worker", "--mode", "db")
    wait_until(
        lambda: db_rows(
            d,
            "SELECT count(*) FROM runs_event WHERE run_id = %s AND type = 'message.delta'",
            (run_id,),
        )[0][0],
        timeout=120,
        what="the reply's first piece",
    )
    with psycopg.connect(d.database_url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]
    assert killed >= 1
    wait_until(
        lambda: status(d, run_id)["status"] in ("SUCCEEDED", "FAILED", "PAUSED"),
        timeout=180,
        what="the run to settle",
    )
    assert status(d, run_id)["status"] == "SUCCEEDED", d.logs(worker)
    types = [e["type"] for e in facts(d, run_id)["events"]]
    assert "step.failed" not in types
    assert "db.connection_lost" in types or "step.released" in types, types
    assert worker.poll() is None


def test_a_read_only_database_is_an_outage_logged_once_per_period(deployment_factory):
    """A failover to a standby: every session ends, and for a while the server that
    answers is read-only (SQLSTATE 25006). The worker backs off like after a lost
    connection, logs a few lines instead of a traceback per poll, and the run succeeds."""
    d = deployment_factory("postgres", {**ENV, "AGENTOPS_LOG_LEVEL": "WARNING"})
    run_id = start_with_command(d, "faulty", "read-only", '{"case": "sleep", "seconds": "4"}')
    worker = d.popen("worker", "--mode", "db")
    wait_until(lambda: step_status(d, run_id, "produce") == "RUNNING", timeout=120, what="produce")
    with psycopg.connect(d.database_url, autocommit=True) as admin:
        name = admin.execute("SELECT current_database()").fetchone()[0]
        admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        wait_until(
            lambda: "read-only transaction" in d.logs(worker)[1], timeout=60, what="read-only"
        )
        # The outage lasts a while (a failover's length), whatever the worker does in it:
        # the simulated fault's duration, not a wait for a condition.
        time.sleep(6)
        admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
    wait_until(
        lambda: status(d, run_id)["status"] in ("SUCCEEDED", "FAILED", "PAUSED"),
        timeout=180,
        what="the run to settle",
    )
    stderr = d.logs(worker)[1]
    assert status(d, run_id)["status"] == "SUCCEEDED", stderr
    assert worker.poll() is None
    types = [e["type"] for e in facts(d, run_id)["events"]]
    assert "step.failed" not in types
    # The first failure of each loop (heartbeat, liveness, polling) with a traceback,
    # then one line per period: never one per poll.
    assert len(re.findall(r"WARNING .*\nTraceback", stderr)) <= 3, stderr
    records = [line for line in stderr.splitlines() if re.match(r"\d{4}-\d\d-\d\d ", line)]
    assert len(records) < 40, stderr


def _errors_of(fn) -> BaseException:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error is what the test looks at
        return exc
    raise AssertionError("expected an error")


def _pg():
    return psycopg.connect(_dsn(), autocommit=True)


def _dsn() -> str:
    s = connection.settings_dict
    return (
        f"host={s['HOST'] or 'localhost'} port={s['PORT'] or 5432} dbname={s['NAME']} "
        f"user={s['USER']} password={s['PASSWORD']}"
    )


def _read_only_write():
    from runs.models import Thread

    with connection.cursor() as cursor:
        cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    try:
        Thread.objects.create(thread_id="read-only")
    finally:
        connection.close()


def _wait_session_gone(admin: psycopg.Connection, pid: int, what: str) -> None:
    """Wait until the server lists no session ``pid`` any more."""
    wait_until(
        lambda: not admin.execute(
            "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone(),
        what=what,
        timeout=30,
    )


def _terminated_session():
    with _pg() as victim, _pg() as admin:
        pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        _wait_session_gone(admin, pid, "the terminated session to go")
        victim.execute("SELECT 1")


def _too_many_connections():
    with _pg() as admin:
        admin.execute("DROP ROLE IF EXISTS agentops_no_room")
        admin.execute("CREATE ROLE agentops_no_room LOGIN PASSWORD 'pw' CONNECTION LIMIT 0")
        s = connection.settings_dict
        try:
            psycopg.connect(
                f"host={s['HOST'] or 'localhost'} port={s['PORT'] or 5432} "
                f"dbname={s['NAME']} user=agentops_no_room password=pw"
            ).close()
        finally:
            admin.execute("DROP ROLE agentops_no_room")


def _idle_in_transaction_timeout():
    with _pg() as admin, _pg() as idle:
        idle.execute("SET idle_in_transaction_session_timeout = '100ms'")
        pid = idle.execute("SELECT pg_backend_pid()").fetchone()[0]
        idle.autocommit = False
        idle.execute("SELECT 1")
        _wait_session_gone(admin, pid, "the idle session to time out")
        idle.execute("SELECT 1")


def _serialization_failure():
    with _pg() as a, _pg() as b:
        a.execute("CREATE TABLE IF NOT EXISTS fault_rows (id int PRIMARY KEY, n int)")
        a.execute("INSERT INTO fault_rows VALUES (1, 0) ON CONFLICT DO NOTHING")
        a.autocommit = False
        a.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        a.execute("SELECT n FROM fault_rows WHERE id = 1")
        b.execute("UPDATE fault_rows SET n = n + 1 WHERE id = 1")
        a.execute("UPDATE fault_rows SET n = n + 1 WHERE id = 1")


def _lock_timeout():
    with _pg() as a, _pg() as b:
        a.execute("CREATE TABLE IF NOT EXISTS fault_rows (id int PRIMARY KEY, n int)")
        a.execute("INSERT INTO fault_rows VALUES (1, 0) ON CONFLICT DO NOTHING")
        a.autocommit = False
        a.execute("SELECT n FROM fault_rows WHERE id = 1 FOR UPDATE")
        b.execute("SET lock_timeout = '50ms'")
        b.execute("UPDATE fault_rows SET n = n + 1 WHERE id = 1")


def _statement_timeout():
    with _pg() as a:
        a.execute("SET statement_timeout = '50ms'")
        a.execute("SELECT pg_sleep(5)")


def _sqlite_read_only(tmp_path):
    import sqlite3

    path = tmp_path / "ro.sqlite3"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    sqlite3.connect(f"file:{path}?mode=ro", uri=True).execute("INSERT INTO t VALUES (1)")


def _sqlite_full(tmp_path):
    import sqlite3

    db = sqlite3.connect(tmp_path / "full.sqlite3")
    db.execute("CREATE TABLE t (x)")
    db.execute("PRAGMA max_page_count = 3")
    db.execute("INSERT INTO t VALUES (zeroblob(100000))")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("produce", "kind", "sqlstate"),
    [
        (_read_only_write, "lost", "25006"),
        (_terminated_session, "lost", None),  # 57P01, or a closed socket if read first
        # Refused at connect: psycopg names no SQLSTATE then, only the server's words.
        (_too_many_connections, "lost", None),
        (_idle_in_transaction_timeout, "lost", None),  # 25P03, or a closed socket
        (_serialization_failure, "busy", "40001"),
        (_lock_timeout, "busy", "55P03"),
        (_statement_timeout, "busy", "57014"),
        (_sqlite_read_only, "lost", None),
        (_sqlite_full, "lost", None),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)).strip("_"),
)
def test_each_database_fault_produced_for_real_is_classified(produce, kind, sqlstate, tmp_path):
    require_services()
    args = (tmp_path,) if "sqlite" in produce.__name__ else ()
    exc = _errors_of(lambda: produce(*args))
    assert db_faults.classify(exc) == kind, repr(exc)
    if sqlstate is not None:
        assert getattr(exc.__cause__ or exc, "sqlstate", None) == sqlstate, repr(exc)


@pytest.mark.parametrize(
    ("sqlstate", "kind"),
    [
        ("57P01", "lost"),  # admin shutdown
        ("57P02", "lost"),  # crash shutdown
        ("57P03", "lost"),  # cannot connect now: starting up or shutting down
        ("57P05", "lost"),  # idle session timeout
        ("25006", "lost"),  # read-only (a standby after failover)
        ("53300", "lost"),  # too many connections
        ("53100", "lost"),  # disk full
        ("53200", "lost"),  # out of memory
        ("58030", "lost"),  # I/O error
        ("08006", "lost"),  # connection failure
        ("40001", "busy"),  # serialization failure
        ("40P01", "busy"),  # deadlock
        ("55P03", "busy"),  # lock not available
        ("57014", "busy"),  # statement timeout, cancel
        ("23505", None),  # unique violation: a bug or a race the caller handles
        ("22003", None),  # numeric value out of range: a bad value
        ("42P01", None),  # undefined table: a broken deployment, not an outage
    ],
)
def test_each_sqlstate_of_an_outage_is_classified_and_no_other(sqlstate, kind):
    """The faults that cannot be produced cheaply here (a server starting up, a full
    disk) are classified by their SQLSTATE the same way."""
    error = psycopg.errors.lookup(sqlstate)("from the server")
    assert db_faults.classify(error) == kind


def test_djangos_connection_already_closed_is_a_lost_connection():
    from django.db import InterfaceError

    assert db_faults.classify(InterfaceError("connection already closed")) == db_faults.LOST
