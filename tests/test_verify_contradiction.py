"""A resolution of an unknown outcome that goes against the latest verify answer is
refused on every channel (CLI, API, console) unless it is confirmed, and the confirmed
one records the answer it went against. The run is the origin story for real: a worker
process sets the lamp and dies, the lamp is read again and the verify hook says done."""

import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from apitokens.services import create_token
from lab.sim import devices
from runs.console.access import form_version
from runs.engine.control.preconditions import run_etag
from runs.engine.effects.unknown_outcomes import verify_now
from runs.models import Event, Step
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import unknown_outcome_run

pytestmark = pytest.mark.django_db(transaction=True)


def test_going_against_the_verify_answer_needs_a_confirmation_on_every_channel(
    actors, clients, settings
):
    run = unknown_outcome_run(settings)
    step = Step.objects.get(run=run, status="UNKNOWN")
    with devices.lamp.locked() as lamp:
        lamp["state"]["unreadable"] = False
    assert verify_now(step, actor="user:bob").status == "done"

    with pytest.raises(CommandError, match=r"contradicts_verify"):
        call_command(
            "runs", "resolve", str(run.pk), "--step", step.name,
            "--outcome", "not-done", "--evidence", "looked",
        )  # fmt: skip
    _, raw = create_token(actors["bob"])
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    run.refresh_from_db()
    answer = api.post(
        f"/api/v1/runs/{run.pk}/steps/{step.name}/resolve",
        json.dumps({"outcome": "not-done", "evidence": "looked"}),
        content_type="application/json",
        HTTP_IF_MATCH=run_etag(run),
    )
    assert answer.status_code == 409 and answer.json()["code"] == "contradicts_verify"
    page = clients["bob"].post(
        reverse("console:resolve", args=[step.pk]),
        {"run_version": form_version(run), "outcome": "not-done", "evidence": "looked"},
    )
    assert page.status_code == 409 and "contradicts_verify" in page.content.decode()
    assert Step.objects.get(pk=step.pk).status == "UNKNOWN"
    assert not Event.objects.filter(run=run, type="unknown.resolved").exists()

    # The unknowns page offers the confirmation next to the answer it goes against.
    unknowns = clients["bob"].get(reverse("console:unknowns")).content.decode()
    assert "answered <strong>done</strong>" in unknowns and 'name="against_verify"' in unknowns

    call_command(
        "runs", "resolve", str(run.pk), "--step", step.name, "--outcome", "not-done",
        "--evidence", "the panel flickered; set it again", "--against-verify",
    )  # fmt: skip
    [resolved] = Event.objects.filter(run=run, type="unknown.resolved")
    assert resolved.payload["against_verify"]["answer"] == "done"
    assert resolved.payload["outcome"] == "not-done"


def test_a_resolution_that_agrees_with_the_verify_answer_needs_no_confirmation(actors, settings):
    run = unknown_outcome_run(settings)
    step = Step.objects.get(run=run, status="UNKNOWN")
    with devices.lamp.locked() as lamp:
        lamp["state"]["unreadable"] = False
    assert verify_now(step, actor="cli").status == "done"
    call_command(
        "runs", "resolve", str(run.pk), "--step", step.name, "--outcome", "done",
        "--evidence", "panel shows 70%",
    )  # fmt: skip
    [resolved] = Event.objects.filter(run=run, type="unknown.resolved")
    assert "against_verify" not in resolved.payload


def test_the_run_page_retry_offers_the_confirmation_after_a_done_answer(clients, settings):
    run = unknown_outcome_run(settings)
    step = Step.objects.get(run=run, status="UNKNOWN")
    with devices.lamp.locked() as lamp:
        lamp["state"]["unreadable"] = False
    assert verify_now(step, actor="user:bob").status == "done"

    page = clients["bob"].get(reverse("console:run", args=[run.pk])).content.decode()
    retry_form = page[page.index('class="action retry-form"') :]
    retry_form = retry_form[: retry_form.index("</form>")]
    assert "answered <strong>done</strong>" in retry_form
    assert 'name="against_verify"' in retry_form

    url = reverse("console:retry", args=[run.pk])
    refused = clients["bob"].post(url, {"run_version": form_version(run), "reason": "retry it"})
    assert refused.status_code == 409 and "contradicts_verify" in refused.content.decode()
    assert Step.objects.get(pk=step.pk).status == "UNKNOWN"

    confirmed = clients["bob"].post(
        url, {"run_version": form_version(run), "reason": "retry it", "against_verify": "on"}
    )
    assert confirmed.status_code == 302
    [resolved] = Event.objects.filter(run=run, type="unknown.resolved")
    assert resolved.payload["against_verify"]["answer"] == "done"
    assert resolved.payload["outcome"] == "not-done"
