"""``manage.py workers`` and the console's workers page tell live workers from dead ones
that never recorded their stop: by the liveness signal (advisory lock released, pid
gone) or, for a worker without one, by a heartbeat long stopped; and they show what a
dead worker still holds ("owner dead")."""

import json
import signal
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db.models.functions import Now
from django.urls import reverse

from runs.console.workforce import GONE_AFTER_SILENCES
from runs.engine.control.lifecycle import start_run
from runs.engine.state.clock import db_now
from runs.models import Step, WorkerProcess
from runs.states import StepStatus
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.liveness import (
    SIGNAL,
    hold_step,
    live_signals,
    start_hold,
    wait_locks_released,
)
from tests.support.services import BACKENDS
from tests.support.states import arrange
from tests.support.waiting import wait_until


def _worker(worker_id: str, heartbeat_age: float) -> WorkerProcess:
    worker = WorkerProcess.objects.create(worker_id=worker_id, host="elsewhere", pid=7, mode="db")
    WorkerProcess.objects.filter(pk=worker.pk).update(
        heartbeat_at=db_now() - timedelta(seconds=heartbeat_age)
    )
    return worker


def _run_held_by(owner: str, *, thread_id: str):
    """A run whose first step ``owner`` holds: RUNNING, attempt 1, lease 10 minutes on."""
    run = start_run("room_temperature", thread_id=thread_id, input={"question": "warm?"})
    arrange(
        Step.objects.filter(run=run),
        status=StepStatus.RUNNING,
        owner=owner,
        attempt=1,
        lease_until=db_now() + timedelta(seconds=600),
        heartbeat_at=Now(),
    )
    return run


@pytest.mark.django_db
def test_a_worker_without_a_signal_is_gone_once_its_heartbeat_stopped_long_ago(settings):
    silence = max(10, settings.AGENTOPS_LEASE_SECONDS)
    _worker("elsewhere:1:silent", silence + 5)
    _worker("elsewhere:2:gone", silence * GONE_AFTER_SILENCES + 5)
    run = _run_held_by("elsewhere:2:gone", thread_id="G")
    out = StringIO()
    call_command("workers", "--json", stdout=out)
    listing = json.loads(out.getvalue())
    [silent] = listing["live"]
    assert (silent["worker_id"], silent["silent"]) == ("elsewhere:1:silent", True)
    [gone] = listing["dead"]
    assert (gone["worker_id"], gone["dead"]) == ("elsewhere:2:gone", "no heartbeat for a long time")
    [held] = gone["holds"]
    assert (held["run_id"], held["step"]) == (str(run.pk), "plan")

    out = StringIO()
    call_command("workers", stdout=out)
    text = out.getvalue()
    assert "elsewhere:1:silent (db, pid 7) heartbeat" in text and "SILENT" in text
    assert "dead, never recorded a stop: 1" in text
    assert "elsewhere:2:gone (db, pid 7) heartbeat" in text
    assert "DEAD (no heartbeat for a long time)" in text
    assert f"holds {run.pk} room_temperature.plan attempt 1, lease " in text
    assert "s left, owner dead" in text


@pytest.mark.django_db
def test_the_workers_page_lists_dead_workers_and_what_they_hold(clients, settings):
    _worker("elsewhere:3:gone", max(10, settings.AGENTOPS_LEASE_SECONDS) * 60)
    _run_held_by("elsewhere:3:gone", thread_id="H")
    page = clients["alice"].get(reverse("console:workers")).content.decode()
    assert "Live (0)" in page
    dead = page.split('id="dead-workers"')[1].split("</table>")[0]
    assert "elsewhere:3:gone" in dead and "no heartbeat for a long time" in dead
    assert "plan attempt 1" in dead and "owner dead" in dead


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_worker_is_listed_dead_with_the_step_it_still_holds(deployment_factory, backend):
    # One worker, the default 30 s lease: nobody releases the step, so the listing
    # shows the dead owner still holding it.
    d = deployment_factory(backend, {"AGENTOPS_POLL_SECONDS": 0.2})
    run_id = start_hold(d, "K")
    worker = d.popen("worker")
    wait_until(lambda: live_signals(d) == [SIGNAL[backend]], what="the worker to publish liveness")
    wait_until(lambda: hold_step(d, run_id)[0] == "RUNNING", what="the worker to claim the step")
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)
    if backend == "postgres":
        wait_locks_released(d)
    listing = d.manage_json("workers", "--json")
    assert listing["live"] == []
    [dead] = listing["dead"]
    reason = {"postgres": "advisory lock released", "sqlite": f"pid {worker.pid} is gone"}
    assert (dead["pid"], dead["dead"]) == (worker.pid, reason[backend])
    [held] = dead["holds"]
    assert (held["run_id"], held["step"], held["attempt"]) == (run_id, "hold", 1)
    text = d.manage("workers", check=True).stdout
    assert "no live workers" in text
    assert f"DEAD ({reason[backend]})" in text
    # The lease may have run out meanwhile on a loaded machine: "left" or "expired".
    assert "bench_hold.hold attempt 1, lease" in text and ", owner dead" in text
