"""Console actions through the Django test client: each works for the right role and
writes an event with actor ``user:<username>``, is refused (403) for the wrong one, is
refused when the run changed meanwhile, and needs a CSRF token."""

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from runs.console.access import form_version
from runs.engine.control import refusals
from runs.models import Approval, Checkpoint, Event, Run, Step, Takeover
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import (
    run_worker_in_process,
    start_room_temperature,
)
from tests.support.states import arrange

# Real in-process workers open and close their own connections: transactional tests.
pytestmark = pytest.mark.django_db(transaction=True)


def events(run, type_):
    return list(Event.objects.filter(run=run, type=type_).order_by("seq"))


@pytest.fixture
def pending_run(actors):
    return start_room_temperature("T-pending")


@pytest.fixture
def paused_run(actors):
    """A real run paused by the engine: its budget allows no model call."""
    run = start_room_temperature("T-paused", budget={"model_calls": 0})
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "PAUSED"
    return run


def post(client, url, run=None, **data):
    if run is not None:
        run.refresh_from_db()
        data.setdefault("run_version", form_version(run))
    return client.post(url, data)


def test_it_cancels_a_run_for_an_operator_with_the_actor_and_reason(clients, pending_run):
    response = post(
        clients["bob"],
        reverse("console:cancel", args=[pending_run.pk]),
        pending_run,
        reason="customer withdrew",
    )
    assert response.status_code == 302
    pending_run.refresh_from_db()
    assert pending_run.status in ("CANCEL_REQUESTED", "CANCELLED")
    [event] = events(pending_run, "run.cancel_requested")
    assert event.actor == "user:bob" and event.payload["reason"] == "customer withdrew"


@pytest.mark.parametrize("who", ["alice", "carol", "dave"])
def test_it_refuses_cancel_to_anyone_but_an_operator(clients, pending_run, who):
    response = post(
        clients[who], reverse("console:cancel", args=[pending_run.pk]), pending_run, reason="no"
    )
    assert response.status_code == 403
    pending_run.refresh_from_db()
    assert pending_run.status == "PENDING" and not events(pending_run, "run.cancel_requested")


def test_it_refuses_get_on_an_action(clients, pending_run):
    assert clients["bob"].get(reverse("console:cancel", args=[pending_run.pk])).status_code == 405


def test_it_needs_a_reason_to_cancel(clients, pending_run):
    response = post(
        clients["bob"], reverse("console:cancel", args=[pending_run.pk]), pending_run, reason="  "
    )
    assert response.status_code == 400
    assert b"cancel needs a reason" in response.content
    assert response.refusal_code == "reason_required"
    pending_run.refresh_from_db()
    assert pending_run.status == "PENDING"


def test_it_refuses_a_reason_over_the_limit_whole_instead_of_cutting_it(clients, pending_run):
    response = post(
        clients["bob"],
        reverse("console:cancel", args=[pending_run.pk]),
        pending_run,
        reason="x" * (refusals.MAX_REASON_CHARS + 1),
    )
    assert response.status_code == 400
    assert b"reason must be at most 2000 characters (it has 2001) [invalid_input]" in (
        response.content
    )
    pending_run.refresh_from_db()
    assert pending_run.status == "PENDING" and pending_run.cancel_reason == ""


def test_it_refuses_an_approvers_comment_over_the_limit(clients, waiting_report):
    approval = Approval.objects.get(run=waiting_report)
    response = post(
        clients["carol"],
        reverse("console:decide", args=[approval.pk]),
        waiting_report,
        decision="approve",
        comment="c" * 2001,
    )
    assert response.status_code in (400, 422)
    assert b"comment must be at most 2000 characters" in response.content
    approval.refresh_from_db()
    assert approval.status == "PENDING"


def test_it_refuses_a_stale_action_on_a_run_that_changed(clients, pending_run):
    shown_version = form_version(pending_run)
    run_worker_in_process()  # the run moves on after the page was shown
    pending_run.refresh_from_db()
    assert pending_run.status == "SUCCEEDED"
    before = pending_run.event_seq
    response = clients["bob"].post(
        reverse("console:cancel", args=[pending_run.pk]),
        {"run_version": shown_version, "reason": "too late"},
    )
    assert response.status_code == 409
    assert b"This run changed, reload" in response.content
    pending_run.refresh_from_db()
    assert pending_run.status == "SUCCEEDED" and pending_run.event_seq == before


def test_it_enforces_csrf_on_actions(actors, pending_run):
    client = Client(enforce_csrf_checks=True)
    client.force_login(actors["bob"])
    url = reverse("console:cancel", args=[pending_run.pk])
    data = {"run_version": form_version(pending_run), "reason": "no token"}
    assert client.post(url, data).status_code == 403
    pending_run.refresh_from_db()
    assert pending_run.status == "PENDING"
    client.get(reverse("console:run", args=[pending_run.pk]))
    token = client.cookies["csrftoken"].value
    response = client.post(url, data, HTTP_X_CSRFTOKEN=token)  # as htmx sends it
    assert response.status_code == 302


def test_it_redispatches_the_open_step(clients, pending_run):
    response = post(
        clients["bob"], reverse("console:redispatch", args=[pending_run.pk]), pending_run
    )
    assert response.status_code == 302
    [event] = events(pending_run, "run.resume_requested")
    assert event.actor == "user:bob"
    assert (
        post(
            clients["alice"], reverse("console:redispatch", args=[pending_run.pk]), pending_run
        ).status_code
        == 403
    )


def test_it_retries_the_failed_step_of_a_paused_run(clients, demo):
    run = demo["retries_exhausted"]
    url = reverse("console:retry", args=[run.pk])
    assert post(clients["alice"], url, run, reason="x").status_code == 403
    response = post(clients["bob"], url, run, reason="dependency is back")
    assert response.status_code == 302, response.content.decode()
    [event] = events(run, "step.retry_requested")
    assert event.actor == "user:bob" and event.payload["reason"] == "dependency is back"
    run.refresh_from_db()
    assert run.status == "RUNNING"


def test_it_raises_the_budget_and_resumes_the_paused_run(clients, paused_run):
    url = reverse("console:budget", args=[paused_run.pk])
    assert post(clients["alice"], url, paused_run, reason="x", add_model_calls=5).status_code == 403
    nothing = post(clients["bob"], url, paused_run, reason="more", add_model_calls=0)
    assert nothing.status_code == 400 and b"invalid_budget" in nothing.content
    response = post(clients["bob"], url, paused_run, reason="customer pays", add_model_calls=5)
    assert response.status_code == 302
    [event] = events(paused_run, "budget.raised")
    assert event.actor == "user:bob"
    paused_run.refresh_from_db()
    assert paused_run.status != "PAUSED"
    run_worker_in_process()
    paused_run.refresh_from_db()
    assert paused_run.status == "SUCCEEDED"


def test_it_previews_then_resumes_from_a_checkpoint(clients, paused_run):
    url = reverse("console:resume_preview", args=[paused_run.pk])
    assert clients["alice"].get(url, {"checkpoint": "start"}).status_code == 403
    preview = clients["bob"].get(
        url, {"checkpoint": "start", "input_patch": '{"question": "How warm is the attic?"}'}
    )
    assert preview.status_code == 200
    assert preview.context["plan"].steps_to_rerun == ["plan", "read_temperature", "reply"]
    assert "How warm is the attic?" in preview.content.decode()
    bad = clients["bob"].get(url, {"checkpoint": "start", "input_patch": "{not json"})
    assert bad.status_code == 400 and b"not valid JSON" in bad.content
    assert b"[invalid_json]" in bad.content
    not_object = clients["bob"].get(url, {"checkpoint": "start", "input_patch": "[1]"})
    assert not_object.status_code == 400 and b"must be a JSON object" in not_object.content
    assert b"[invalid_input]" in not_object.content
    generation = paused_run.generation
    form = {
        "checkpoint": "start",
        "reason": "try again",
        "input_patch": '{"question": "How warm is the attic?"}',
    }
    # A confirmation without the plan it confirms shows that plan and asks again.
    unplanned = post(clients["bob"], url, paused_run, **form)
    assert unplanned.status_code == 200 and b"confirm again" in unplanned.content
    paused_run.refresh_from_db()
    assert paused_run.generation == generation
    previewed = unplanned.context["previewed"]
    response = post(clients["bob"], url, paused_run, previewed=previewed, **form)
    assert response.status_code == 302
    paused_run.refresh_from_db()
    assert paused_run.generation == generation + 1
    assert paused_run.status in ("PENDING", "RUNNING")
    resumed = [e for e in Event.objects.filter(run=paused_run, actor="user:bob")]
    assert resumed and any(e.payload.get("reason") == "try again" for e in resumed)


def test_it_checks_the_outside_world_and_resolves_an_unknown_outcome(clients, demo):
    run = demo["unknown"]
    step = Step.objects.get(run=run, status="UNKNOWN")
    verify_url = reverse("console:verify", args=[step.pk])
    assert clients["alice"].post(verify_url).status_code == 403
    answer = clients["bob"].post(verify_url, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200 and b"<html" not in answer.content
    assert answer.context["answer"].status in ("done", "not_done", "cannot_tell")
    [verified] = events(run, "operation.verified")
    assert verified.actor == "user:bob"
    assert verified.payload["requested_by"] == "user:bob"
    assert verified.payload["answer"] == answer.context["answer"].status
    assert verified.payload["idempotency_key"] and verified.payload["status"] == "UNKNOWN"
    resolve_url = reverse("console:resolve", args=[step.pk])
    assert post(clients["carol"], resolve_url, run, outcome="done", evidence="x").status_code == 403
    missing = post(clients["bob"], resolve_url, run, outcome="done", evidence="")
    assert missing.status_code == 400
    done = {"outcome": "done", "evidence": "the lamp reads 70%", "result": '{"brightness": 70}'}
    if verified.payload["answer"] == "not_done":
        # Going against the check needs the confirmation the form then offers.
        refused = post(clients["bob"], resolve_url, run, **done)
        assert refused.status_code == 409 and b"contradicts_verify" in refused.content
        done["against_verify"] = "on"
    response = post(clients["bob"], resolve_url, run, **done)
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == "RUNNING"
    resolved = [
        e
        for e in Event.objects.filter(run=run, actor="user:bob")
        if e.payload.get("evidence") == "the lamp reads 70%"
    ]
    assert resolved


def test_it_lets_an_approver_approve_and_refuses_others(clients, waiting_report):
    approval = Approval.objects.get(run=waiting_report, status="PENDING")
    url = reverse("console:decide", args=[approval.pk])
    for who in ("alice", "bob", "dave"):
        assert post(clients[who], url, waiting_report, decision="approve").status_code == 403
    page = clients["carol"].get(reverse("console:approvals")).content.decode()
    assert "report.md" in page  # the artifact preview, as escaped text
    response = post(
        clients["carol"], url, waiting_report, decision="approve", comment="looks right"
    )
    assert response.status_code == 302
    approval.refresh_from_db()
    assert approval.status == "APPROVED" and approval.decided_by.username == "carol"
    assert approval.comment == "looks right"
    conflicting = post(clients["carol"], url, waiting_report, decision="reject")
    assert conflicting.status_code == 409
    approval.refresh_from_db()
    assert approval.status == "APPROVED"


def test_it_claims_and_resolves_a_takeover_and_keeps_others_off_it(clients, actors, paused_run):
    from django.contrib.auth import get_user_model

    from runs.console.roles import setup_roles

    erin = get_user_model().objects.create_user("erin", password="x")
    erin.groups.add(setup_roles()["operator"])
    erin_client = Client()
    erin_client.force_login(erin)
    takeover = Takeover.objects.get(run=paused_run, status="OPEN")
    claim = reverse("console:claim", args=[takeover.pk])
    assert post(clients["alice"], claim, paused_run).status_code == 403
    assert post(clients["bob"], claim, paused_run).status_code == 302
    takeover.refresh_from_db()
    assert takeover.claimed_by.username == "bob"
    resolve = reverse("console:resolve_takeover", args=[takeover.pk])
    refused = post(erin_client, resolve, paused_run, action="cancel", reason="mine now")
    assert refused.status_code == 409 and b"claimed" in refused.content
    response = post(clients["bob"], resolve, paused_run, action="cancel", reason="not worth it")
    assert response.status_code == 302
    takeover.refresh_from_db()
    paused_run.refresh_from_db()
    assert takeover.status == "RESOLVED" and paused_run.status in ("CANCEL_REQUESTED", "CANCELLED")
    assert any(e.actor == "user:bob" for e in events(paused_run, "run.cancel_requested"))


def test_it_marks_a_takeover_done_with_evidence_and_a_result(clients, paused_run):
    takeover = Takeover.objects.get(run=paused_run, status="OPEN")
    url = reverse("console:resolve_takeover", args=[takeover.pk])
    no_evidence = post(clients["bob"], url, paused_run, action="mark_done", reason="done by hand")
    assert no_evidence.status_code == 400
    bad_result = post(
        clients["bob"],
        url,
        paused_run,
        action="mark_done",
        reason="r",
        evidence="e",
        result="{oops",
    )
    assert bad_result.status_code == 400
    plan_output = {
        "tool_calls": [
            {"id": "call_manual", "name": "thermostat.read", "arguments": {"room": "living room"}}
        ]
    }
    response = post(
        clients["bob"],
        url,
        paused_run,
        action="mark_done",
        reason="planned by hand",
        evidence="operator wrote the plan",
        result=json.dumps(plan_output),
    )
    assert response.status_code == 302, response.content
    takeover.refresh_from_db()
    assert takeover.status == "RESOLVED"
    assert takeover.resolved_by == "user:bob"


def test_it_confirms_bulk_actions_and_skips_runs_they_do_not_apply_to(clients, actors):
    a = start_room_temperature("B1")
    b = start_room_temperature("B2")
    done = start_room_temperature("B3")
    arrange(Run.objects.filter(pk=done.pk), status="SUCCEEDED")
    ids = [a.pk, b.pk, done.pk]
    assert (
        clients["alice"].post(reverse("console:bulk"), {"action": "cancel", "run": ids}).status_code
        == 403
    )
    confirm = clients["bob"].post(reverse("console:bulk"), {"action": "cancel", "run": ids})
    assert confirm.status_code == 200
    assert {r.pk for r in confirm.context["apply"]} == {a.pk, b.pk}
    assert [(r.pk, why) for r, why in confirm.context["skip"]] == [(done.pk, "already SUCCEEDED")]
    for run in (a, b, done):
        run.refresh_from_db()
        assert run.status in ("PENDING", "SUCCEEDED")  # nothing changed yet
    stale_version = b.version
    arrange(Run.objects.filter(pk=b.pk), version=stale_version + 1)  # b moves meanwhile
    result = clients["bob"].post(
        reverse("console:bulk"),
        {
            "action": "cancel",
            "confirm": "1",
            "reason": "cleanup",
            "run": [a.pk, b.pk],
            f"version_{a.pk}": a.version,
            f"version_{b.pk}": stale_version,
        },
    )
    assert result.status_code == 200
    assert [r.pk for r in result.context["done"]] == [a.pk]
    assert [r.pk for r, _ in result.context["skipped"]] == [b.pk]
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.status in ("CANCEL_REQUESTED", "CANCELLED") and b.status == "PENDING"
    assert events(a, "run.cancel_requested")[0].actor == "user:bob"


def test_it_records_actions_in_the_audit_log(clients, pending_run):
    post(
        clients["bob"],
        reverse("console:cancel", args=[pending_run.pk]),
        pending_run,
        reason="audit me",
    )
    page = clients["alice"].get(reverse("console:audit"), {"user": "bob"})
    rows = list(page.context["events"])
    assert rows and all(e.actor == "user:bob" for e in rows)
    assert "run.cancel_requested" in {e.type for e in rows}
    assert "audit me" in page.content.decode()


def test_the_admin_cancels_only_through_the_engine(clients, pending_run):
    url = reverse("admin:runs_run_changelist")
    assert clients["bob"].get(url).status_code == 200
    response = clients["bob"].post(
        url, {"action": "request_cancel_action", "_selected_action": [str(pending_run.pk)]}
    )
    assert response.status_code == 302
    pending_run.refresh_from_db()
    assert pending_run.status in ("CANCEL_REQUESTED", "CANCELLED")
    assert events(pending_run, "run.cancel_requested")[0].actor == "user:bob"
    change = clients["bob"].get(reverse("admin:runs_run_change", args=[pending_run.pk]))
    assert change.status_code == 200 and b'name="status"' not in change.content


def test_the_resume_preview_offers_checkpoints_in_run_order(clients, waiting_report):
    url = reverse("console:resume_preview", args=[waiting_report.pk])
    preview = clients["bob"].get(url, {"checkpoint": "start"})
    assert preview.status_code == 200
    saved = list(
        Checkpoint.objects.filter(run=waiting_report).order_by("pk").values_list("name", flat=True)
    )
    offered = re.findall(r'<option value="([^"]+)"', preview.content.decode())
    assert offered[0] == "start" and offered == [n for n in saved if n in offered]
    assert len(offered) >= 3 and offered != sorted(offered)
