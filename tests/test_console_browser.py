"""The console in a real headless Chromium (Debian's ``chromium``, driven by Playwright for
Python with ``executable_path``; no browser download; ``tests.support.browser``), against
pytest-django's live server. Real worker processes make the unknown outcome and finish
the run. A screenshot of each page visited is saved under ``test-artifacts/screenshots/``.
"""

import re
import subprocess

import pytest
from django.urls import reverse

from lab.sim import devices
from runs.engine.control import lifecycle
from runs.models import Approval, Event, Step
from tests.support.browser import *  # noqa: F403 - fixtures (browser, open_as)
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import (
    REPO_ROOT,
    run_worker_in_process,
    start_room_temperature,
    unknown_outcome_run,
    worker_subprocess_env,
)
from tests.support.services import manage_argv

pytestmark = pytest.mark.django_db(transaction=True)

#: Upper bound for things the page should show "soon" (polling every 2 s); not a timing
#: assertion, only how long to wait before giving up.
PATIENCE_MS = 60_000


def _visit(page, url: str, name: str) -> None:
    response = page.goto(page.base + url)
    assert response.status == 200, url
    page.shot(name)


def test_an_operator_resolves_an_unknown_outcome_and_sees_the_run_finish(open_as, settings):
    run = unknown_outcome_run(settings)
    page = open_as("bob")
    page.shot("overview")
    page.click("text=Triage")
    group = page.locator("#group-unknown_outcome")
    group.locator(f"text={str(run.pk)[:8]}").wait_for()
    page.shot("triage")
    group.locator(".triage-item", has_text=str(run.pk)[:8]).locator(
        "text=Verify and resolve"
    ).click()
    page.wait_for_url(re.compile(r".*/unknowns/.*"))
    with devices.lamp.locked() as lamp:  # someone power-cycled the lamp: readable again
        lamp["state"]["unreadable"] = False
    step = Step.objects.get(run=run, status="UNKNOWN")
    section = page.locator(f"#step-{step.pk}")
    section.locator("text=Check the outside world now").click()
    answer = section.locator(".verify-status")
    answer.wait_for()
    assert answer.inner_text() == "done"
    assert "70" in section.locator(".verify-answer").inner_text()
    # The hook's result is offered as the call's result (htmx out-of-band swap).
    assert '"brightness": 70' in section.locator(f"#result-{step.pk}").input_value()
    page.shot("unknowns-verified")
    resolve = section.locator("form.resolve-form")
    resolve.locator("input[value=done]").check()
    resolve.locator("input[name=evidence]").fill("verify: the lamp reads 70%, the target")
    resolve.locator("button[type=submit]").click()
    page.wait_for_url(re.compile(rf".*/runs/{run.pk}/$"))
    assert page.locator("#run-status").inner_text() in ("RUNNING", "PENDING")
    worker = subprocess.Popen(
        manage_argv("worker", "--burst", "--mode", "db"),
        env=worker_subprocess_env(settings),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        # No reload: the header polls itself through htmx.
        page.locator("#run-status", has_text="SUCCEEDED").wait_for()
    finally:
        output = worker.communicate(timeout=120)[0]
    assert worker.returncode == 0, output
    page.locator("#messages", has_text="70%").wait_for()  # the reply, after the refresh
    page.shot("run-finished")
    assert devices.device_calls(str(run.pk)).get("lamp.set_brightness") == 1
    assert devices.lamp.snapshot()["state"]["brightness"] == 70
    _visit(page, reverse("console:audit") + "?user=bob", "audit")
    assert "verify: the lamp reads 70%" in page.content()


def test_an_approver_approves_the_weekly_report(open_as):
    run = lifecycle.start_run("weekly_report", thread_id="R", input={"week": "2026-W48"})
    run_worker_in_process()
    approval = Approval.objects.get(run=run, status="PENDING")
    page = open_as("carol")
    _visit(page, reverse("console:approvals"), "approvals")
    card = page.locator(f"#approval-{approval.pk}")
    assert "report.md" in card.inner_text()
    card.locator("input[name=comment]").fill("numbers checked")
    card.locator("button[value=approve]").click()
    page.locator(".messages", has_text="approved").wait_for()
    page.shot("approved")
    approval.refresh_from_db()
    assert approval.status == "APPROVED" and approval.decided_by.username == "carol"
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "SUCCEEDED"
    assert devices.device_calls(str(run.pk)).get("publisher.publish") == 1
    _visit(page, reverse("console:approvals"), "approvals-decided")
    assert "numbers checked" in page.locator("#decided").inner_text()


def test_a_viewer_sees_no_action_buttons(open_as, demo):
    page = open_as("alice")
    pages = {
        "overview": reverse("console:overview"),
        "triage": reverse("console:triage"),
        "runs": reverse("console:runs"),
        "run-paused": reverse("console:run", args=[demo["retries_exhausted"].pk]),
        "run-running": reverse("console:run", args=[demo["running"].pk]),
        "unknowns": reverse("console:unknowns"),
        "approvals": reverse("console:approvals"),
        "takeovers": reverse("console:takeovers"),
        "workers": reverse("console:workers"),
        "audit": reverse("console:audit"),
    }
    for name, url in pages.items():
        _visit(page, url, name)
        assert page.locator("form.action").count() == 0, name
        assert page.locator("input[type=checkbox][name=run]").count() == 0, name
        for label in (
            "Cancel",
            "Approve",
            "Reject",
            "Resolve",
            "Claim",
            "Retry",
            "Re-dispatch",
            "Check the outside world",
            "resume from here",
        ):
            assert page.get_by_role("button", name=re.compile(label)).count() == 0, (name, label)
            assert page.get_by_role("link", name=re.compile(label)).count() == 0, (name, label)


def test_an_operator_resumes_from_a_checkpoint_through_the_preview(open_as):
    run = start_room_temperature("T-resume", budget={"model_calls": 0})
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "PAUSED"
    page = open_as("bob")
    _visit(page, reverse("console:run", args=[run.pk]), "run-paused")
    page.locator("#checkpoints").locator("text=resume from here…").first.click()
    page.locator("#resume-plan").wait_for()
    assert page.locator("#steps-to-rerun li").all_inner_texts() == [
        "plan",
        "read_temperature",
        "reply",
    ]
    page.fill("textarea[name=input_patch]", '{"question": "How warm is the attic?"}')
    page.locator("#resume-plan", has_text="How warm is the attic?").wait_for()  # inline
    page.shot("resume-preview")
    page.fill("#resume-form input[name=reason]", "budget fixed, start over for the attic")
    page.click("#resume-confirm")
    page.wait_for_url(re.compile(rf".*/runs/{run.pk}/$"))
    page.locator(".messages", has_text="resumed").wait_for()
    run.refresh_from_db()
    assert run.generation == 2
    assert any(
        e.payload.get("input_patch") == {"question": "How warm is the attic?"}
        for e in Event.objects.filter(run=run, actor="user:bob")
    )
    page.shot("resumed")
    assert "generation 2" in page.locator("#run-header").inner_text()
