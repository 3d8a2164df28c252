"""Console actions act only on the run their form was checked against: a change that
lands between the form's version check and the action is refused (409), not applied."""

import pytest
from django.contrib.messages.storage.fallback import FallbackStorage
from django.contrib.sessions.backends.db import SessionStore
from django.test import RequestFactory

from runs.console.access import form_version, stale_run
from runs.console.actions import perform
from runs.engine.effects.budget import raise_budget
from runs.models import Event
from tests.support.in_process import *  # noqa: F403 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def console_request(user):
    request = RequestFactory().post("/")
    request.user = user
    request.session = SessionStore()
    request._messages = FallbackStorage(request)
    return request


def test_a_change_between_the_check_and_the_action_is_refused(actors, demo):
    run = demo["budget"]
    request = console_request(actors["bob"])
    assert stale_run(request, run, form_version(run)) is None
    # Someone else raises the budget after this form passed its check.
    raise_budget(run, actor="user:carol", reason="first", add_model_calls=1)
    response = perform(
        request,
        lambda: raise_budget(run, actor="user:bob", reason="second", add_model_calls=1),
        back="/",
        success="raised",
    )
    assert response.status_code == 409 and b"run_changed" in response.content
    assert [e.actor for e in Event.objects.filter(run=run, type="budget.raised")] == ["user:carol"]


def test_an_unchanged_run_is_acted_on(actors, demo):
    run = demo["budget"]
    request = console_request(actors["bob"])
    assert stale_run(request, run, form_version(run)) is None
    response = perform(
        request,
        lambda: raise_budget(run, actor="user:bob", reason="more", add_model_calls=1),
        back="/",
        success="raised",
    )
    assert response.status_code == 302
    assert Event.objects.filter(run=run, type="budget.raised").count() == 1
