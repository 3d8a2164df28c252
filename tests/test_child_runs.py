"""Child runs with real worker subprocesses: a parent step waits for its children with
no lease held and gets their results; a child's failure is the parent step's failure
with its code; a crash between starting the children and recording the wait starts each
child once; cancelling the parent cancels its open children with their compensation;
a detached child outlives its parent; the sweeper cancels the attached children of a
parent whose end hook never ran and of a parent step a resume superseded."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

import tests.workflows.children  # noqa: F401 - registers the test workflows here too
from apitokens.services import create_token
from runs.engine.control import children
from runs.engine.control.cancel import request_cancel
from runs.engine.control.lifecycle import redispatch, start_run
from runs.engine.control.rewind import resume_from_checkpoint
from runs.engine.control.waits import deliver_signal
from runs.engine.execution import watchdog
from runs.engine.state import gateway
from runs.models import Event, Run, Step
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_subprocess, worker_subprocess_env

pytestmark = pytest.mark.django_db(transaction=True)

CHILDREN = {"AGENTOPS_EXTRA_WORKFLOW_MODULES": "tests.workflows.children"}


def _burst(settings, **extra):
    done = run_worker_subprocess(worker_subprocess_env(settings, **CHILDREN, **extra))
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _output(run: Run, step: str):
    return Step.objects.get(run=run, name=step).output


def test_a_parent_waits_for_its_children_and_a_child_failure_is_its_failure(settings):
    triage = start_run("triage_demo", thread_id="tri", input={"tickets": 3, "hold_s": 0})
    good = start_run("one_kid", thread_id="good", input={"n": 4})
    bad = start_run("one_kid", thread_id="bad", input={"n": 5, "fail": "TICKET_REJECTED"})
    refused = start_run("one_kid", thread_id="refused", input={"n": 1000})
    none = start_run("triage_demo", thread_id="none", input={"tickets": 0, "hold_s": 0})
    # Two slots: a burst must not end while a slot commits the children it started.
    _burst(settings, AGENTOPS_WORKER_CONCURRENCY=2)

    triage.refresh_from_db()
    assert triage.status == "SUCCEEDED"
    kids = list(Run.objects.filter(parent_run=triage).order_by("child_position"))
    assert [(k.workflow, k.child_position, k.status) for k in kids] == [
        ("triage_ticket", p, "SUCCEEDED") for p in range(3)
    ]
    assert all(k.parent_step.name == "triage" and not k.detached for k in kids)
    # Each child on its own thread; the answers in position order, then summed.
    assert len({k.thread_id for k in kids} | {triage.thread_id}) == 4
    assert _output(triage, "triage") == [{"ticket": n, "priority": 1 + n % 3} for n in range(3)]
    assert _output(triage, "combine") == {"tickets": 3, "priority_total": 6}
    types = list(
        Event.objects.filter(run=triage, step__name="triage")
        .order_by("seq")
        .values_list("type", flat=True)
    )
    assert types.count("child.started") == 3
    assert types.index("step.waiting") < types.index("step.succeeded")

    good.refresh_from_db()
    assert good.status == "SUCCEEDED"
    assert _output(good, "report") == {"got": {"doubled": 8}}
    # thread="parent": the child shares its parent's thread.
    assert Run.objects.get(parent_run=good).thread_id == good.thread_id

    bad.refresh_from_db()
    child = Run.objects.get(parent_run=bad)
    assert child.status == "FAILED" and child.error_code == "TICKET_REJECTED"
    assert bad.status == "FAILED" and bad.error_code == "TICKET_REJECTED"
    ask = Step.objects.get(run=bad, name="ask")
    assert ask.status == "FAILED" and ask.error_code == "TICKET_REJECTED"
    assert str(child.pk) in ask.error_detail
    assert not Step.objects.filter(run=bad, name="report").exists()

    # An input the child workflow refuses starts no child and fails the step for good.
    refused.refresh_from_db()
    assert (refused.status, refused.error_code) == ("FAILED", "CHILD_INPUT_INVALID")
    assert "input.n" in refused.error_detail
    assert not Run.objects.filter(parent_run=refused).exists()
    none.refresh_from_db()
    assert none.status == "SUCCEEDED"
    assert _output(none, "combine") == {"tickets": 0, "priority_total": 0}


def test_a_crash_between_starting_the_children_and_recording_the_wait_starts_each_once(
    settings,
):
    run = start_run(
        "triage_demo",
        thread_id="crash",
        input={"tickets": 3, "hold_s": 0},
        faults={"crash_at": "child_started"},
    )
    first = run_worker_subprocess(worker_subprocess_env(settings, **CHILDREN))
    assert first.returncode == -9, first.stdout + first.stderr
    assert "CRASH at child_started" in first.stdout
    step = Step.objects.get(run=run, name="triage")
    assert (step.status, step.attempt) == ("RUNNING", 1), first.stdout
    assert Run.objects.filter(parent_run=run).count() == 3
    # As ``runs resume`` does: liveness knows the worker is dead and hands the step back.
    redispatch(run, actor="test")

    _burst(settings)
    run.refresh_from_db()
    assert run.status == "SUCCEEDED"
    step.refresh_from_db()
    assert step.attempt == 2
    kids = Run.objects.filter(parent_run=run)
    assert sorted(kids.values_list("child_position", flat=True)) == [0, 1, 2]
    assert set(kids.values_list("status", flat=True)) == {"SUCCEEDED"}
    assert Event.objects.filter(run=run, type="child.started").count() == 3
    assert _output(run, "combine") == {"tickets": 3, "priority_total": 6}


def test_cancelling_the_parent_cancels_its_three_open_children_with_compensation(
    settings, actors, clients
):
    parent = start_run("triage_demo", thread_id="cancel", input={"tickets": 3, "hold_s": 3600})
    _burst(settings)
    parent.refresh_from_db()
    assert parent.status == "WAITING_EXTERNAL"
    triage = Step.objects.get(run=parent, name="triage")
    # The parent waits with no worker and no lease.
    assert (triage.status, triage.owner, triage.lease_until) == ("WAITING", "", None)
    kids = Run.objects.filter(parent_run=parent).order_by("child_position")
    # Each child claimed its ticket and holds on a durable timer.
    assert list(kids.values_list("status", flat=True)) == ["RUNNING"] * 3
    _shows_the_family(parent, list(kids), actors, clients["bob"])
    # Waiting for children is silent by design: the watchdog flags nobody.
    settings.AGENTOPS_STUCK_SECONDS = 0
    assert watchdog.flag_stuck_runs("watchdog", 100) == 0

    request_cancel(parent, actor="alice", reason="customer withdrew")

    parent.refresh_from_db()
    assert parent.status == "CANCELLED"
    for kid in Run.objects.filter(parent_run=parent):
        assert kid.status == "CANCELLED"
        assert kid.cancel_reason == f"parent run {parent.pk} is CANCELLED"
        assert kid.compensation_status == "DONE"
        assert [(s["step"], s["status"]) for s in kid.compensation["steps"]] == [
            ("claim", "COMPENSATED")
        ]
        assert not Step.objects.filter(run=kid, name="answer", status="SUCCEEDED").exists()


def test_a_detached_child_outlives_its_parent_and_the_sweeper_cancels_orphans(
    settings, monkeypatch
):
    detaching = start_run("detaching", thread_id="detached", input={})
    attaching = start_run("attaching", thread_id="attached", input={})
    _burst(settings)
    detaching.refresh_from_db()
    attaching.refresh_from_db()
    free = Run.objects.get(parent_run=detaching)
    held = Run.objects.get(parent_run=attaching)
    assert detaching.status == "SUCCEEDED" and free.detached
    assert _output(detaching, "done") == {"children": [str(free.pk)]}
    assert attaching.status == "WAITING_EXTERNAL" and not held.detached
    assert {free.status, held.status} == {"WAITING_EXTERNAL"}

    # A resume from before the child step supersedes it: nobody waits for its child,
    # which the sweeper cancels; the step of the new generation starts a new child.
    resume_from_checkpoint(attaching, "start", actor="alice", reason="start over")
    assert children.settle_children("sweeper", 100) == 1
    held.refresh_from_db()
    assert held.status == "CANCELLED"
    _burst(settings)
    again = Run.objects.filter(parent_run=attaching).exclude(pk=held.pk).get()
    assert again.status == "WAITING_EXTERNAL"
    assert again.parent_step.generation == 2

    # The process that ends the parent dies before its hook: the sweeper finishes the job.
    monkeypatch.setattr(gateway, "RUN_FINISHED_HOOKS", {})
    request_cancel(attaching, actor="alice", reason="stop")
    again.refresh_from_db()
    assert again.status == "WAITING_EXTERNAL"
    monkeypatch.undo()
    assert children.settle_children("sweeper", 100) == 1
    again.refresh_from_db()
    free.refresh_from_db()
    assert again.status == "CANCELLED"
    assert again.cancel_reason == f"parent run {attaching.pk} is CANCELLED"
    assert free.status == "WAITING_EXTERNAL"

    deliver_signal(free.pk, "go", {}, actor="test")
    _burst(settings)
    free.refresh_from_db()
    assert free.status == "SUCCEEDED"


def _shows_the_family(parent: Run, kids: list[Run], actors, console: Client) -> None:
    """The API's run documents and list filter, and the console's run pages and runs
    list, link the parent and its children."""
    _, raw = create_token(actors["bob"])
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    doc = api.get(f"/api/v1/runs/{parent.pk}").json()
    assert doc["parent"] is None and doc["children_total"] == 3
    assert [(c["id"], c["step"], c["position"]) for c in doc["children"]] == [
        (str(k.pk), "triage", n) for n, k in enumerate(kids)
    ]
    kid = api.get(f"/api/v1/runs/{kids[1].pk}").json()
    assert kid["parent_run"] == str(parent.pk)
    assert kid["parent"] == {
        "run": str(parent.pk), "step": "triage", "position": 1, "detached": False
    }  # fmt: skip
    listed = api.get("/api/v1/runs", {"parent": str(parent.pk)[:8]}).json()
    assert listed["count"] == 3
    assert {item["id"] for item in listed["items"]} == {str(k.pk) for k in kids}
    for bad in ("f" * 37, "zz", "abc", "----"):
        refused = api.get("/api/v1/runs", {"parent": bad})
        assert refused.status_code == 422, (bad, refused.content)
    with pytest.raises(CommandError, match=r"--parent: .*\[unknown_run\]"):
        call_command("runs", "list", "--parent", "zz")
    out = StringIO()
    call_command("runs", "list", "--parent", str(parent.pk)[:8], stdout=out)
    assert "3 runs match" in out.getvalue()

    page = console.get(reverse("console:run", args=[parent.pk])).content.decode()
    assert "waiting for child runs: 3 of 3 open" in page
    assert f"?parent={parent.pk}" in page
    for k in kids:
        assert reverse("console:run", args=[k.pk]) in page
    page = console.get(reverse("console:run", args=[kids[0].pk])).content.decode()
    assert 'id="child-of"' in page and reverse("console:run", args=[parent.pk]) in page
    listing = console.get(reverse("console:runs"), {"parent": str(parent.pk)}).content.decode()
    for k in kids:
        assert reverse("console:run", args=[k.pk]) in listing
    assert reverse("console:run", args=[parent.pk]) not in listing
