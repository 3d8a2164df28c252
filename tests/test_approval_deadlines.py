"""An approval's deadline holds at every action, not only at the sweeper: deciding one
past its ``expires_at`` (database clock) on the engine, the CLI, the API or the console
is refused with ``approval_expired`` and the approval is EXPIRED with its run on the
expiry route in the same transaction; resuming a run paused past the deadline takes the
expiry route; every list shows it EXPIRED and the console offers no decision form."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from agentops.authoring import Workflow, register
from apitokens.services import create_token
from approvals.services import decide, resolve_takeover
from runs.console.access import form_version
from runs.console.roles import setup_roles
from runs.engine.control.approvals import ApprovalExpired
from runs.engine.control.lifecycle import pause_run, start_run
from runs.engine.control.preconditions import run_etag
from runs.engine.execution import executor
from runs.models import Approval, Event, Run, Step
from runs.states import RunStatus, StepStatus
from runs.workflows import registry
from tests.support.in_process import *  # noqa: F403

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gated():
    workflow = Workflow("gated_ship", version=1)

    @workflow.approval(on_expire="shelve", expires_after=3600)
    def ask(ctx):
        return {"question": "Ship it?", "reason": "a person decides", "evidence": {}}

    @workflow.step()
    def ship(ctx):
        ctx.goto(None)
        return {"shipped": True}

    @workflow.step()
    def shelve(ctx):
        return {"shelved": True}

    register(workflow)
    yield workflow
    registry.unregister("gated_ship", 1)


def waiting_approval(worker) -> Approval:
    run = start_run("gated_ship", thread_id="t", input={})
    executor.execute_step(Step.objects.get(run=run, name="ask").pk, worker)
    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING_APPROVAL
    return Approval.objects.get(run=run)


def past_deadline(approval: Approval) -> None:
    """The deadline passed and no sweep ran (``expires_at`` is not a state column)."""
    Approval.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=11)
    )


def assert_on_expiry_route(approval: Approval, actor: str) -> None:
    approval.refresh_from_db()
    assert approval.status == Approval.Status.EXPIRED
    run = Run.objects.get(pk=approval.run_id)
    assert run.status == RunStatus.RUNNING
    assert list(Step.objects.filter(run=run).order_by("seq").values_list("name", "status")) == [
        ("ask", StepStatus.SUCCEEDED),
        ("shelve", StepStatus.PENDING),
    ]
    expired = Event.objects.get(run=run, type="approval.expired")
    assert (expired.actor, expired.payload["reason"]) == (actor, "decided after expires_at")
    assert not Event.objects.filter(run=run, type="approval.approved").exists()


def test_it_refuses_a_decision_past_the_deadline_and_takes_the_expiry_route(gated, worker, actors):
    approval = waiting_approval(worker)
    past_deadline(approval)

    with pytest.raises(ApprovalExpired) as refused:
        decide(approval, decision="approve", user=actors["carol"])

    assert refused.value.code == "approval_expired"
    assert_on_expiry_route(approval, "user:carol")
    # A second try is refused the same way and changes nothing more.
    with pytest.raises(ApprovalExpired):
        decide(approval, decision="approve", user=actors["carol"])
    assert Event.objects.filter(run_id=approval.run_id, type="approval.expired").count() == 1


def test_it_still_decides_before_the_deadline(gated, worker, actors):
    approval = waiting_approval(worker)
    decided = decide(approval, decision="approve", user=actors["carol"])
    assert decided.status == Approval.Status.APPROVED


def test_the_cli_refuses_it_in_one_line_and_lists_it_expired(gated, worker, actors):
    approval = waiting_approval(worker)
    past_deadline(approval)
    listed = StringIO()
    call_command("approvals", "list", "--json", stdout=listed)
    assert [(r["id"], r["status"]) for r in json.loads(listed.getvalue())] == [
        (approval.pk, "EXPIRED")
    ]

    with pytest.raises(CommandError) as refused:
        call_command("approvals", "decide", str(approval.pk), "approve", "--as", "carol")

    assert "[approval_expired]" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert_on_expiry_route(approval, "user:carol")


def test_the_api_answers_409_approval_expired_and_lists_it_expired(gated, worker, actors):
    approval = waiting_approval(worker)
    past_deadline(approval)
    carol = actors["carol"]
    carol.is_staff = True  # a staff viewer's token sees every run
    carol.save()
    carol.groups.add(setup_roles()["viewer"])
    _, raw = create_token(carol)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    listed = api.get("/api/v1/approvals").json()
    assert [(a["id"], a["status"]) for a in listed] == [(approval.pk, "EXPIRED")]
    assert api.get("/api/v1/approvals?status=PENDING").json() == []

    response = api.post(
        f"/api/v1/approvals/{approval.pk}/decide",
        json.dumps({"decision": "approve"}),
        content_type="application/json",
        HTTP_IF_MATCH=run_etag(Run.objects.get(pk=approval.run_id)),
    )

    assert response.status_code == 409
    assert response.json()["code"] == "approval_expired"
    assert_on_expiry_route(approval, "user:carol")


def test_the_console_shows_it_expired_without_a_form_and_refuses_a_decision(gated, worker, clients):
    approval = waiting_approval(worker)
    page = clients["carol"].get("/approvals/").content.decode()
    assert "decide-form" in page
    past_deadline(approval)

    page = clients["carol"].get("/approvals/").content.decode()
    assert "it can no longer be decided" in page
    assert "decide-form" not in page

    run = Run.objects.get(pk=approval.run_id)
    response = clients["carol"].post(
        f"/approvals/{approval.pk}/decide/",
        {"decision": "approve", "run_version": form_version(run)},
    )
    assert response.status_code == 409
    assert "approval_expired" in response.content.decode()
    assert_on_expiry_route(approval, "user:carol")


def test_resuming_a_run_paused_past_the_deadline_takes_the_expiry_route(gated, worker, actors):
    approval = waiting_approval(worker)
    pause_run(Run.objects.get(pk=approval.run_id), actor="cli", reason="hold on")
    past_deadline(approval)

    takeover = Run.objects.get(pk=approval.run_id).takeovers.get(status="OPEN")
    resolve_takeover(takeover, action="resume", actor="cli", reason="go on")

    approval.refresh_from_db()
    assert approval.status == Approval.Status.EXPIRED
    run = Run.objects.get(pk=approval.run_id)
    assert run.status == RunStatus.RUNNING
    assert Step.objects.get(run=run, name="shelve").status == StepStatus.PENDING


def test_resuming_a_run_paused_past_its_signal_deadline_takes_the_timeout_route(worker):
    run = start_run("order_followup", thread_id="t", input={"order": "A-1", "delay_s": 0})
    run_worker_in_process()  # noqa: F405
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_EXTERNAL
    pause_run(run, actor="cli", reason="hold on")
    Step.objects.filter(run=run, status=StepStatus.WAITING).update(
        wait_until=timezone.now() - timedelta(seconds=11)
    )

    takeover = Run.objects.get(pk=run.pk).takeovers.get(status="OPEN")
    resolve_takeover(takeover, action="resume", actor="cli", reason="go on")

    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert Event.objects.filter(run=run, type="signal.timed_out").count() == 1
    assert Step.objects.get(run=run, name="remind").status == StepStatus.PENDING
