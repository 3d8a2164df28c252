"""A database that restarts or terminates sessions under a running step is an
infrastructure fault: the finished work is committed (the commit reconnects and retries
behind the fence), the lost connection is recorded, and the run never fails for it.
Real PostgreSQL servers and worker processes."""

import time

import psycopg
import pytest
from django.db import connection

from runs.drills.base import wait_terminal
from runs.drills.sandbox import PgCluster, Sandbox, wait_until
from runs.engine.control.lifecycle import start_run
from runs.models import Event, Step
from runs.states import RunStatus, StepStatus
from tests.control_support import facts, status, step_status
from tests.control_support import wait_until as wait_for
from tests.support.services import require_services

pytestmark = pytest.mark.services

ENV = {
    "AGENTOPS_LEASE_SECONDS": "10",
    "AGENTOPS_POLL_SECONDS": "0.2",
    "AGENTOPS_SWEEP_SECONDS": "0.5",
    "AGENTOPS_EXTRA_WORKFLOW_MODULES": "tests.workflows.faulty",
}


def test_a_restart_during_a_step_keeps_its_finished_work(django_db_blocker):
    require_services()
    cluster = PgCluster().init()
    try:
        with django_db_blocker.unblock(), Sandbox("restart", env=ENV, server=cluster.server) as box:
            run = start_run("faulty", thread_id="restart", input={"case": "sleep", "seconds": "6"})
            box.start_worker(mode="db")
            assert wait_until(
                lambda: Step.objects.filter(
                    run=run, name="produce", status=StepStatus.RUNNING
                ).exists(),
                60,
                0.05,
            )
            time.sleep(2)
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
    run_id = d.manage(
        "runs",
        "start",
        "room_temperature",
        "--thread",
        "kill",
        "--input",
        '{"question": "How warm is the living room?"}',
        check=True,
    ).stdout.strip()
    worker = d.popen("worker", "--mode", "db")
    wait_for(lambda: step_status(d, run_id, "reply") == "RUNNING", timeout=120, what="reply")
    time.sleep(1)
    with psycopg.connect(d.database_url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]
    assert killed >= 1
    wait_for(
        lambda: status(d, run_id)["status"] in ("SUCCEEDED", "FAILED", "PAUSED"),
        timeout=180,
        what="the run to settle",
    )
    assert status(d, run_id)["status"] == "SUCCEEDED", d.logs(worker)
    types = [e["type"] for e in facts(d, run_id)["events"]]
    assert "step.failed" not in types
    assert "db.connection_lost" in types or "step.released" in types, types
    assert worker.poll() is None
