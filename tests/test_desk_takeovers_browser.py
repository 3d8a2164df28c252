"""The takeover desk and the resume page as an operator uses them, in headless Chromium
(``tests.support.browser``): a card of facts per open takeover with one form per
resolution, a resume with an input patch in one step (the plan refreshed inline, the
patch kept by the confirmation), a resolution against the latest verify answer only
with an explicit confirmation that the event records; each page at 390 px and 1400 px,
clean under axe-core, with a screenshot.
"""

import re

import pytest
from django.urls import reverse

from lab.sim import devices
from runs.console.access import form_version
from runs.engine.effects.unknown_outcomes import verify_now
from runs.models import Event, Run, Step, Takeover
from tests.support.browser import *  # noqa: F403 - fixtures (browser, open_as)
from tests.support.browser import check_desk_page
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import (
    run_worker_in_process,
    start_room_temperature,
    unknown_outcome_run,
)

pytestmark = pytest.mark.django_db(transaction=True)

PATCH = '{"question": "How warm is the attic?"}'


def _paused_on_budget() -> tuple[Run, Takeover]:
    run = start_room_temperature("T-desk", budget={"model_calls": 0})
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "PAUSED"
    return run, Takeover.objects.get(run=run, status="OPEN")


def test_an_operator_resumes_with_an_input_patch_in_one_step_from_the_desk(open_as):
    run, takeover = _paused_on_budget()
    page = open_as("bob")
    page.goto(page.base + reverse("console:takeovers"))
    card = page.locator(f"#takeover-{takeover.pk}")
    facts = card.locator("dl.facts")
    for fact in ("Why it paused", "What was done", "Where it failed", "Suggested action"):
        assert fact in facts.inner_text()
    assert "How warm is the living room?" in facts.inner_text()  # the run's parameters
    assert card.locator("form.decision-form").count() == 4  # one small form per decision
    check_desk_page(page, "takeovers")

    card.get_by_role("link", name=re.compile("Resume with an input patch")).click()
    page.locator("#resume-plan h2").wait_for()
    page.get_by_label(re.compile("Checkpoint")).select_option("start")
    page.locator("#resume-plan", has_text="Resuming from start").wait_for()
    page.get_by_label(re.compile("Input patch")).fill(PATCH)
    page.locator("#resume-plan", has_text="How warm is the attic?").wait_for()  # inline
    page.get_by_label("Reason").fill("budget fixed, start over for the attic")
    check_desk_page(page, "resume-plan")
    page.get_by_role("button", name=re.compile("Confirm resume from start")).click()
    page.wait_for_url(re.compile(rf".*/runs/{run.pk}/$"))
    page.locator(".messages", has_text="resumed").wait_for()
    run.refresh_from_db()
    assert run.generation == 2
    [resumed] = Event.objects.filter(run=run, type="run.resumed_from_checkpoint")
    assert resumed.payload["input_patch"] == {"question": "How warm is the attic?"}


def test_a_confirmation_of_a_patch_the_plan_was_not_made_for_shows_the_plan_and_keeps_it(
    clients,
):
    run, _ = _paused_on_budget()
    url = reverse("console:resume_preview", args=[run.pk])
    bob = clients["bob"]
    form = {
        "run_version": form_version(run),
        "checkpoint": "start",
        "input_patch": PATCH,
        "reason": "attic",
        "previewed": '["start", null, false]',  # the plan shown had no patch
    }
    shown = bob.post(url, form)
    assert shown.status_code == 200
    page = shown.content.decode()
    assert "Nothing was done yet; confirm again" in page
    assert "How warm is the attic?" in page and "&quot;question&quot;" in page  # kept
    run.refresh_from_db()
    assert run.generation == 1
    previewed = re.search(r'name="previewed" value="([^"]*)"', page).group(1)
    done = bob.post(url, {**form, "previewed": previewed.replace("&quot;", '"')})
    assert done.status_code == 302
    [resumed] = Event.objects.filter(run=run, type="run.resumed_from_checkpoint")
    assert resumed.payload["input_patch"] == {"question": "How warm is the attic?"}


def test_a_retry_against_the_verify_answer_needs_a_confirmation_and_records_it(
    open_as, clients, settings
):
    run = unknown_outcome_run(settings)
    takeover = Takeover.objects.get(run=run, status="OPEN")
    step = Step.objects.get(run=run, status="UNKNOWN")
    with devices.lamp.locked() as lamp:  # the lamp is readable again: it was set
        lamp["state"]["unreadable"] = False
    assert verify_now(step, actor="user:bob").status == "done"

    refused = clients["bob"].post(
        reverse("console:resolve_takeover", args=[takeover.pk]),
        {"run_version": form_version(run), "action": "retry", "reason": "try again"},
    )
    assert refused.status_code == 409 and "contradicts_verify" in refused.content.decode()
    assert Takeover.objects.get(pk=takeover.pk).status == "OPEN"

    page = open_as("bob")
    page.goto(page.base + reverse("console:takeovers"))
    card = page.locator(f"#takeover-{takeover.pk}")
    retry = card.locator("form.resolve-retry")
    assert "answered done" in retry.inner_text()
    check_desk_page(page, "takeover-verify")
    retry.get_by_label("Reason").fill("the lamp flickered, set it again")
    retry.get_by_role("checkbox").check()
    retry.get_by_role("button", name="Retry").click()
    page.locator(".messages", has_text="resolved").wait_for()
    assert Takeover.objects.get(pk=takeover.pk).resolution == "retry"
    [resolved] = Event.objects.filter(run=run, type="takeover.resolved")
    assert resolved.payload["against_verify"]["answer"] == "done"
    assert resolved.actor == "user:bob"


def test_marking_done_from_its_own_form_resolves_the_takeover(open_as):
    run, takeover = _paused_on_budget()
    page = open_as("bob", width=390)
    page.goto(page.base + reverse("console:takeovers"))
    done = page.locator(f"#takeover-{takeover.pk} form.resolve-mark-done")
    done.get_by_label(re.compile("Evidence")).fill("I read the thermostat myself: 21 °C")
    done.get_by_label(re.compile("Result as JSON")).fill('{"plan": "read_temperature"}')
    done.get_by_label("Reason").fill("no budget needed for this")
    done.get_by_role("button", name="Mark done").click()
    page.locator(".messages", has_text="resolved (mark_done)").wait_for()
    takeover.refresh_from_db()
    assert takeover.status == "RESOLVED" and takeover.resolution == "mark_done"
    [resolved] = Event.objects.filter(run=run, type="takeover.resolved")
    assert resolved.payload["evidence"] == "I read the thermostat myself: 21 °C"
