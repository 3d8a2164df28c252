"""A worker whose commit waits past the lock timeout (PostgreSQL ``lock_timeout``, SQLite's
busy timeout) retries the transaction: the finished step is committed once the lock is
released, by the same attempt, never lost or turned into a failure. A real worker
subprocess; the lock is held by another connection of this test."""

import sqlite3
import subprocess
import threading

import pytest
from django.db import connection, connections

import tests.workflows.faulty  # noqa: F401 - registers the workflow
from runs.engine.control.lifecycle import start_run
from runs.models import Event, Run, Step
from runs.states import RunStatus, StepStatus
from tests.support.in_process import REPO_ROOT, device_dir, worker_subprocess_env  # noqa: F401
from tests.support.services import manage_argv
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: What the worker logs when a transaction waited past its lock limit and is retried.
RETRY_LINE = "failed (busy:"


class HeldLock:
    """The lock a commit of ``run`` needs, held from another connection until
    ``release()``: the run row (``FOR UPDATE``) on PostgreSQL, the database's write lock
    (``BEGIN IMMEDIATE``) on SQLite."""

    def __init__(self, run: Run):
        if connection.vendor == "postgresql":
            self._conn = connections.create_connection("default")
            self._conn.set_autocommit(False)
            with self._conn.cursor() as cursor:
                cursor.execute("SELECT id FROM runs_run WHERE id = %s FOR UPDATE", [run.pk])
        else:
            self._conn = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
            self._conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self._conn.rollback()
        self._conn.close()


def test_a_commit_that_waits_past_the_lock_timeout_is_retried_and_kept(settings, device_dir):  # noqa: F811
    run = start_run("faulty", thread_id="t-lock", input={"case": "sleep", "seconds": "2"})
    env = worker_subprocess_env(
        settings,
        AGENTOPS_EXTRA_WORKFLOW_MODULES="tests.workflows.faulty",
        AGENTOPS_WORKER_LOCK_TIMEOUT="0.3",
        AGENTOPS_SQLITE_BUSY_SECONDS="0.3",
    )
    worker = subprocess.Popen(
        manage_argv("worker", "--burst", "--mode", "db"),
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    log: list[str] = []
    retried = threading.Event()

    def read_log():
        for line in worker.stderr:
            log.append(line)
            if RETRY_LINE in line and "commit of step" in line:
                retried.set()

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    produce = Step.objects.get(run=run, name="produce")
    try:
        wait_until(
            lambda: Step.objects.get(pk=produce.pk).status == StepStatus.RUNNING,
            what="produce to run",
            timeout=60,
            interval=0.05,
        )
        lock = HeldLock(run)
        try:
            # The step finishes its work while the lock is held: its commit must wait,
            # give up at the limit and retry, at least once, before the lock goes.
            assert retried.wait(60), "".join(log)
        finally:
            lock.release()
        assert worker.wait(120) == 0, "".join(log)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        reader.join(10)

    produce.refresh_from_db()
    run.refresh_from_db()
    assert (produce.status, produce.attempt, produce.error_code) == (StepStatus.SUCCEEDED, 1, "")
    assert produce.output == {"slept": True}
    assert run.status == RunStatus.SUCCEEDED
    types = list(Event.objects.filter(run=run, step=produce).values_list("type", flat=True))
    assert "step.retry_scheduled" not in types and "step.failed" not in types
    [lost] = Event.objects.filter(run=run, type="db.connection_lost")
    assert lost.payload["during"] == "commit" and lost.payload["attempt"] == 1
    assert lost.payload["retries"] >= 1
    assert all(error.startswith("busy:") for error in lost.payload["errors"])
