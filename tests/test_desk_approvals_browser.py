"""The approvals inbox as an approver uses it, in headless Chromium (``tests.support.
browser``): an agent's tool call with its conversation, its tool's description and its
arguments as a generated form; an edit confirmed after its diff and used by the run; a
refused edit answered in place; an expired approval that cannot be decided; the keys;
each page at 390 px and 1400 px wide, clean under axe-core, with a screenshot.
"""

import io
import json
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse

from lab.sim import shop
from runs.engine.control import lifecycle
from runs.engine.state.clock import db_now
from runs.models import Approval, Event, Run
from tests.support.browser import *  # noqa: F403 - fixtures (browser, open_as)
from tests.support.browser import check_desk_page
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_in_process

pytestmark = pytest.mark.django_db(transaction=True)

PROMPT = {"prompt": "Order A1001 arrived broken, please refund it"}


def _refund_waiting() -> tuple[Run, Approval]:
    """A real support_agent run (the offline model) waiting for its refund's approval."""
    run = lifecycle.start_run("support_agent", thread_id="refund", input=PROMPT)
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "WAITING_APPROVAL"
    return run, Approval.objects.get(run=run, status="PENDING")


def test_an_approver_edits_the_refund_in_the_form_confirms_the_diff_and_the_run_uses_it(
    open_as,
):
    run, approval = _refund_waiting()
    page = open_as("carol")
    page.goto(page.base + reverse("console:approvals"))
    card = page.locator(f"#approval-{approval.pk}")
    text = card.inner_text()
    assert "arrived broken" in text  # the customer's words, from the conversation
    assert "lookup_order" in text  # the call the model made before
    # The tool's own description, its docstring's markup removed (``amount`` -> amount).
    assert "Refund amount USD (more than 0) of order order_id to the customer." in text
    assert "``" not in text
    amount = card.get_by_label(re.compile(r"^amount"))
    assert amount.input_value() == "42.0"
    check_desk_page(page, "inbox")

    amount.fill("12.5")
    card.get_by_role("button", name="Approve").click()
    diff = page.locator(f"#approval-{approval.pk}-diff")
    diff.wait_for()
    assert re.search(r"amount\s+42\.0\s+12\.5", diff.inner_text()), diff.inner_text()
    assert Approval.objects.get(pk=approval.pk).status == "PENDING"  # not yet: a diff first
    check_desk_page(page, "diff")
    page.get_by_role("button", name="Confirm approve with these arguments").click()
    page.locator(".messages", has_text="approved").wait_for()

    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "SUCCEEDED"
    assert [r["amount"] for r in shop.refunds_for("A1001")] == ["12.50"]
    [event] = Event.objects.filter(run=run, type="approval.approved")
    assert event.payload["edited"]["from"] == {"order_id": "A1001", "amount": 42.0}
    assert event.payload["edited"]["to"] == {"order_id": "A1001", "amount": 12.5}

    page.goto(page.base + reverse("console:approvals"))
    decided = page.locator("#decided")
    assert "arguments edited" in decided.inner_text()
    assert '"amount": 12.5' in decided.inner_text()
    check_desk_page(page, "decided")

    page.goto(page.base + reverse("console:run", args=[run.pk]))
    call = page.locator(".tool-call", has_text="issue_refund")
    assert "arguments edited" in call.inner_text()
    ran, asked = call.inner_text().split("the model asked")
    assert '"amount": 12.5' in ran and '"amount": 42.0' in asked


def test_a_refused_edit_is_answered_in_place_with_the_fields_error_and_kept(open_as):
    run, approval = _refund_waiting()
    page = open_as("carol", width=390)
    page.goto(page.base + reverse("console:approvals"))
    card = page.locator(f"#approval-{approval.pk}")
    card.get_by_label(re.compile(r"^amount")).fill("-5")
    with page.expect_response(re.compile(r"/decide/$")) as answer:
        card.get_by_role("button", name="Approve").click()
    assert answer.value.status == 400
    card = page.locator(f"#approval-{approval.pk}")
    amount = card.get_by_label(re.compile(r"^amount"))
    assert amount.input_value() == "-5"  # the edit is kept
    assert amount.get_attribute("aria-invalid") == "true"
    assert "greater than 0" in card.locator(".argument.has-error .field-error").inner_text()
    assert page.evaluate("document.activeElement.name") == "arg-amount"
    check_desk_page(page, "refused-edit")
    assert Approval.objects.get(pk=approval.pk).status == "PENDING"

    # The raw JSON editor carries the same edit; fixed there, it goes through.
    card.get_by_label("raw JSON").check()
    raw = card.get_by_label(re.compile("Arguments as JSON"))
    assert json.loads(raw.input_value()) == {"order_id": "A1001", "amount": -5}
    raw.fill('{"order_id": "A1001", "amount": 7}')
    card.get_by_role("button", name="Approve").click()
    page.get_by_role("button", name="Confirm approve with these arguments").click()
    page.locator(".messages", has_text="approved").wait_for()
    run_worker_in_process()
    assert [r["amount"] for r in shop.refunds_for("A1001")] == ["7.00"]


def test_an_expired_approval_is_shown_expired_and_a_countdown_ends_in_expiry(open_as, settings):
    settings.AGENTOPS_APPROVAL_EXPIRY_SECONDS = 3600
    past = lifecycle.start_run("weekly_report", thread_id="R1", input={"week": "2026-W47"})
    soon = lifecycle.start_run("weekly_report", thread_id="R2", input={"week": "2026-W48"})
    run_worker_in_process()
    expired = Approval.objects.get(run=past)
    Approval.objects.filter(pk=expired.pk).update(expires_at=db_now() - timedelta(minutes=1))
    ending = Approval.objects.get(run=soon)
    page = open_as("carol")
    Approval.objects.filter(pk=ending.pk).update(expires_at=db_now() + timedelta(seconds=6))
    page.goto(page.base + reverse("console:approvals"))
    card = page.locator(f"#approval-{expired.pk}")
    assert "Expired" in card.inner_text()
    assert card.get_by_role("button").count() == 0
    countdown = page.locator(f"#approval-{ending.pk}")
    assert "Expires in" in countdown.inner_text()
    countdown.locator(".expiry-past").wait_for()  # the countdown reached zero
    assert countdown.get_by_role("button", name="Approve").is_disabled()
    check_desk_page(page, "expired")


def test_keys_move_between_approvals_and_approve_the_chosen_one(open_as):
    first = lifecycle.start_run("weekly_report", thread_id="K1", input={"week": "2026-W45"})
    second = lifecycle.start_run("weekly_report", thread_id="K2", input={"week": "2026-W46"})
    run_worker_in_process()
    chosen = Approval.objects.get(run=second)
    page = open_as("carol")
    page.goto(page.base + reverse("console:approvals"))
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.id") == f"approval-{chosen.pk}"
    page.keyboard.press("k")
    page.keyboard.press("j")
    page.keyboard.press("a")
    page.locator(".messages", has_text="approved").wait_for()
    assert Approval.objects.get(pk=chosen.pk).status == "APPROVED"
    assert Approval.objects.get(run=first).status == "PENDING"


def test_r_rejects_an_agents_call_with_a_message_for_the_model(open_as):
    run, approval = _refund_waiting()
    page = open_as("carol")
    page.goto(page.base + reverse("console:approvals"))
    page.keyboard.press("j")
    page.keyboard.press("r")
    page.keyboard.type("Refunds need a manager.")
    page.keyboard.press("Enter")
    page.locator(".messages", has_text="rejected").wait_for()
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "SUCCEEDED" and shop.refunds_for("A1001") == []
    [event] = Event.objects.filter(run=run, type="approval.rejected")
    assert event.payload["message"] == "Refunds need a manager."


def test_the_cli_shows_both_what_the_model_asked_and_what_ran(actors):
    from django.contrib.auth.models import User

    from approvals.services import decide

    run, approval = _refund_waiting()
    carol = User.objects.get(username="carol")
    decide(approval, decision="approve", user=carol, arguments={"order_id": "A1001", "amount": 3})
    out = io.StringIO()
    call_command("approvals", "list", "--all", "--json", stdout=out)
    [row] = json.loads(out.getvalue())
    assert row["arguments_asked"] == {"order_id": "A1001", "amount": 42.0}
    assert row["arguments_ran"] == {"order_id": "A1001", "amount": 3}
    assert row["arguments_edited"] is True
    out = io.StringIO()
    call_command("approvals", "list", "--all", stdout=out)
    [edited] = [line for line in out.getvalue().splitlines() if "arguments edited" in line]
    assert '"amount": 3' in edited.split("the model asked")[0]
    assert '"amount": 42.0' in edited.split("the model asked")[1]
    out = io.StringIO()
    call_command("runs", "status", str(run.pk), "--json", stdout=out)
    calls = [c for m in json.loads(out.getvalue())["messages"] for c in m["tool_calls"]]
    [refund] = [c for c in calls if c["name"] == "issue_refund"]
    assert refund["arguments"] == {"order_id": "A1001", "amount": 42.0}
    assert refund["edited"]["to"] == {"order_id": "A1001", "amount": 3}
