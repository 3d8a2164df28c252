"""Leases and fencing: one claimer wins, a stale worker's late commit is rejected, and
duplicated notifications change nothing."""

import json
import threading
import time

import pytest
from django.db import connection

from agentops.authoring import Workflow, register
from lab.sim.devices import device_calls
from runs.engine.control.lifecycle import start_run
from runs.engine.execution import executor, jobs
from runs.engine.execution.identity import set_current_worker
from runs.models import Event, Message, Run, Step
from runs.states import RunStatus, StepStatus
from runs.workflows import registry

CONTENDER = """
import json, time
from django.db import transaction
from runs.engine.state.leases import claim_step
ids = {ids}; start = {start}; won = []
# The contenders' common start line: part of the race staged, not a wait for a condition.
while time.time() < start: time.sleep(0.001)
for step_id in ids:
    with transaction.atomic():
        attempt = claim_step(step_id, "{name}", 30)
    if attempt is not None:
        won.append([step_id, attempt])
print(json.dumps(won))
"""


def test_it_lets_exactly_one_of_two_processes_claim_each_step(deployment_factory):
    d = deployment_factory("postgres")
    setup = d.shell(
        "import json\n"
        "from runs.engine.control.lifecycle import start_run\n"
        "from runs.models import Step\n"
        "run = start_run('room_temperature', thread_id='c', input={'question': 'q'})\n"
        "Step.objects.bulk_create(\n"
        "    [Step(run=run, name='plan', seq=100 + i) for i in range(60)]\n"
        ")\n"
        "print(json.dumps(list(Step.objects.filter(run=run).values_list('pk', flat=True))))"
    )
    ids = json.loads(setup.strip().splitlines()[-1])
    # Both processes start claiming at the same instant, in the same order.
    start = time.time() + 4
    procs = [
        d.popen(
            "shell",
            "-v",
            "0",
            "-c",
            CONTENDER.format(ids=json.dumps(ids), start=start, name=f"w{n}"),
        )
        for n in (1, 2)
    ]
    results = []
    for proc in procs:
        assert proc.wait(timeout=120) == 0, d.logs(proc)
        results.append(json.loads(d.logs(proc)[0].strip().splitlines()[-1]))
    won = [step_id for result in results for step_id, _ in result]
    assert sorted(won) == sorted(ids)  # every step claimed, none twice
    assert all(attempt == 1 for result in results for _, attempt in result)
    counts = d.shell(
        "from runs.models import Step\n"
        "print(Step.objects.filter(status='RUNNING', attempt=1).count())"
    )
    assert int(counts) == len(ids)


blocking = Workflow("blocking_test", version=1, input_fields={})
gate = {"release": threading.Event(), "entered": threading.Event()}


@blocking.step()
def work(ctx):
    if ctx.worker_id.startswith("slow"):
        gate["entered"].set()
        gate["release"].wait(30)
        return {"by": "slow"}
    return {"by": "fast"}


@pytest.fixture
def blocking_workflow():
    register(blocking)
    gate["release"].clear()
    gate["entered"].clear()
    yield blocking
    registry.unregister("blocking_test", 1)


@pytest.mark.django_db(transaction=True)
def test_it_rejects_a_stale_workers_late_commit(blocking_workflow):
    from runs.engine.execution.identity import WorkerIdentity

    slow = WorkerIdentity("slow:1:a", "db")
    fast = WorkerIdentity("fast:2:b", "db")
    run = start_run("blocking_test", thread_id="stale", input={})
    step = Step.objects.get(run=run)
    outcome = {}

    def run_slowly():
        try:
            outcome.update(r=executor.execute_step(step.pk, slow))
        finally:
            connection.close()  # this thread's own: left open, it blocks dropping the test DB

    thread = threading.Thread(target=run_slowly)
    thread.start()
    assert gate["entered"].wait(30)
    # The slow worker's lease runs out (it is paused, say); the fast one takes over.
    Step.objects.filter(pk=step.pk).update(lease_until="2000-01-01T00:00:00Z")
    assert executor.execute_step(step.pk, fast).claimed
    gate["release"].set()
    thread.join(30)

    step.refresh_from_db()
    assert step.status == StepStatus.SUCCEEDED
    assert step.attempt == 2
    assert step.output == {"by": "fast"}
    rejected = Event.objects.get(run=run, type="step.commit_rejected")
    assert rejected.payload["attempt"] == 1
    assert "stale attempt 1" in rejected.payload["reason"]
    assert rejected.actor == "slow:1:a"
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    started = Event.objects.filter(run=run, type="step.started").order_by("seq")
    assert [e.payload["attempt"] for e in started] == [1, 2]
    assert started[1].payload["reclaimed_from"] == "slow:1:a"


@pytest.mark.django_db(transaction=True)
def test_it_ignores_duplicate_notifications_for_a_finished_step(worker):
    set_current_worker(worker)
    run = start_run("room_temperature", thread_id="dup", input={"question": "How warm?"})
    first = Step.objects.get(run=run, name="plan")
    assert executor.run_chain(first.pk, worker) == 3
    events = Event.objects.filter(run=run).count()
    steps = list(Step.objects.filter(run=run).values_list("pk", "status", "attempt"))
    for step_id, _, attempt in steps:
        for _ in range(3):
            jobs.execute_step_job(str(run.pk), step_id, attempt)
    assert Event.objects.filter(run=run).count() == events
    assert list(Step.objects.filter(run=run).values_list("pk", "status", "attempt")) == steps
    assert Message.objects.filter(run=run).count() == 4
    assert device_calls(str(run.pk)) == {"thermostat.read": 1}


def test_it_ignores_duplicate_rq_messages_in_a_real_worker(deployment_factory):
    d = deployment_factory("postgres")
    d.manage(
        "runs",
        "start",
        "room_temperature",
        "--thread",
        "D",
        "--input",
        '{"question": "How warm?"}',
        check=True,
    )
    d.manage("worker", "--burst", check=True, timeout=120)
    before = d.manage_json("runs", "status", "--thread", "D", "--json")
    assert before["status"] == "SUCCEEDED"
    d.shell(
        "from runs.engine.execution.dispatch import notify_now\n"
        "from runs.models import Step\n"
        "for s in Step.objects.all():\n"
        "    for _ in range(5): notify_now(s.run_id, s.pk, s.attempt)\n"
    )
    events_before = d.shell("from runs.models import Event; print(Event.objects.count())")
    again = d.manage("worker", "--burst", check=True, timeout=120)
    assert "ENTER" not in again.stdout
    after = d.manage_json("runs", "status", "--thread", "D", "--json")
    assert after == before
    events_after = d.shell("from runs.models import Event; print(Event.objects.count())")
    assert events_after == events_before
