"""The approval policy (no self-approval, superusers need the approver role) and the
audit record of every refused action (403/409), on the console and the API alike."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from apitokens.services import create_token
from runs.console.access import form_version
from runs.engine.control.preconditions import run_etag
from runs.models import Approval, RefusedAction, Run
from tests.support.in_process import *  # noqa: F403

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting(demo, actors):
    """A run waiting for approval, started by carol (the approver)."""
    run = demo["waiting_approval"]
    Run.objects.filter(pk=run.pk).update(owner=actors["carol"])
    run.refresh_from_db()
    return run, Approval.objects.get(run=run, status="PENDING")


def api_decide(user, run, approval, decision="approve"):
    _, raw = create_token(user)
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}").post(
        f"/api/v1/approvals/{approval.pk}/decide",
        json.dumps({"decision": decision}),
        content_type="application/json",
        HTTP_IF_MATCH=run_etag(run),
    )


def console_decide(client, run, approval, decision="approve"):
    run.refresh_from_db()
    return client.post(
        reverse("console:decide", args=[approval.pk]),
        {"decision": decision, "run_version": form_version(run)},
    )


def test_it_refuses_self_approval_through_the_api_and_records_why(actors, waiting):
    run, approval = waiting
    response = api_decide(actors["carol"], run, approval)
    assert (response.status_code, response.json()["code"]) == (403, "self_approval_forbidden")
    approval.refresh_from_db()
    assert approval.status == "PENDING"
    [refused] = RefusedAction.objects.all()
    assert (refused.actor, refused.channel, refused.status_code, refused.code) == (
        "user:carol",
        "api",
        403,
        "self_approval_forbidden",
    )
    assert refused.target == f"approval:{approval.pk}" and "another approver" in refused.reason


def test_it_refuses_self_approval_on_the_console(clients, waiting):
    run, approval = waiting
    response = console_decide(clients["carol"], run, approval)
    assert response.status_code == 403 and b"self_approval_forbidden" in response.content
    approval.refresh_from_db()
    assert approval.status == "PENDING"
    [refused] = RefusedAction.objects.all()
    assert (refused.channel, refused.code) == ("console", "self_approval_forbidden")


def test_it_allows_self_approval_for_the_workflows_the_setting_names(settings, actors, waiting):
    run, approval = waiting
    settings.AGENTOPS_SELF_APPROVAL_WORKFLOWS = frozenset({run.workflow})
    response = api_decide(actors["carol"], run, approval)
    assert response.status_code == 200, response.content
    approval.refresh_from_db()
    assert approval.status == "APPROVED" and approval.decided_by == actors["carol"]
    assert not RefusedAction.objects.exists()


def test_it_lets_a_superuser_decide_only_with_the_approver_role(settings, clients, waiting):
    run, approval = waiting
    root = get_user_model().objects.create_superuser("root", password=PASSWORD)  # noqa: F405
    browser = Client()
    browser.force_login(root)
    refused = console_decide(browser, run, approval)
    assert refused.status_code == 403 and b"approver_role_required" in refused.content
    approval.refresh_from_db()
    assert approval.status == "PENDING"
    settings.AGENTOPS_SUPERUSER_DECIDES = True
    assert console_decide(browser, run, approval).status_code == 302
    approval.refresh_from_db()
    assert approval.status == "APPROVED" and approval.decided_by == root
    assert RefusedAction.objects.get().code == "approver_role_required"


def test_it_lets_a_superuser_with_the_role_decide(actors, waiting):
    from runs.console.roles import setup_roles

    run, approval = waiting
    root = get_user_model().objects.create_superuser("root", password="x")
    root.groups.add(setup_roles()["approver"])
    Run.objects.filter(pk=run.pk).update(owner=None)
    run.refresh_from_db()
    assert api_decide(root, run, approval).status_code == 200


def test_it_records_console_refusals_for_permissions_and_changed_runs(clients, waiting):
    run, approval = waiting
    cancel = reverse("console:cancel", args=[run.pk])
    assert (
        clients["alice"].post(cancel, {"reason": "x", "run_version": form_version(run)}).status_code
        == 403
    )
    stale = clients["bob"].post(cancel, {"reason": "x", "run_version": run.version + 7})
    assert stale.status_code == 409
    rows = list(RefusedAction.objects.order_by("pk").values_list("actor", "status_code", "code"))
    assert rows == [("user:alice", 403, "permission_denied"), ("user:bob", 409, "run_changed")]
    assert RefusedAction.objects.last().target == f"run:{run.pk}"
    page = clients["bob"].get(reverse("console:audit"), {"user": "bob"}).content.decode()
    assert "run_changed" in page and "permission_denied" not in page


def test_it_records_api_conflicts(actors, waiting):
    run, approval = waiting
    _, raw = create_token(actors["bob"])
    response = Client(HTTP_AUTHORIZATION=f"Bearer {raw}").post(
        f"/api/v1/runs/{run.pk}/cancel",
        json.dumps({"reason": "stop"}),
        content_type="application/json",
        HTTP_IF_MATCH='"999.1.00000000"',
    )
    assert (response.status_code, response.json()["code"]) == (409, "run_changed")
    refused = RefusedAction.objects.get()
    assert (refused.actor, refused.channel, refused.target) == ("user:bob", "api", f"run:{run.pk}")
    assert "changed since you read it" in refused.reason
