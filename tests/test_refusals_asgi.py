"""Refused POSTs under ASGI (``manage.py serve``): a missing or stale CSRF token is a
403 recorded in the audit log, exactly as under WSGI, never a 500 from database access
in async code."""

import pytest
from asgiref.sync import async_to_sync
from django.middleware.csrf import get_token
from django.test import AsyncClient, Client, RequestFactory
from django.urls import reverse

from runs.console.access import form_version
from runs.models import Event, RefusedAction
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import start_room_temperature

pytestmark = pytest.mark.django_db(transaction=True)


def _stale_token() -> str:
    """A well-formed CSRF token of another session."""
    return get_token(RequestFactory().get("/"))


@pytest.mark.parametrize("client_class", [AsyncClient, Client])
@pytest.mark.parametrize("token", ["missing", "stale"])
def test_a_post_without_a_valid_csrf_token_is_403_and_audited(actors, client_class, token):
    run = start_room_temperature("T-csrf")
    client = client_class(enforce_csrf_checks=True)
    client.force_login(actors["bob"])
    url = reverse("console:cancel", args=[run.pk])
    headers = {"X-CSRFToken": _stale_token()} if token == "stale" else {}
    data = {"run_version": form_version(run), "reason": "no token"}
    if client_class is AsyncClient:
        page = async_to_sync(client.get)(reverse("console:run", args=[run.pk]))
        response = async_to_sync(client.post)(url, data, headers=headers)
    else:
        page = client.get(reverse("console:run", args=[run.pk]))
        response = client.post(url, data, headers=headers)
    assert page.status_code == 200 and "csrftoken" in client.cookies
    assert response.status_code == 403
    run.refresh_from_db()
    assert run.status == "PENDING"
    assert not Event.objects.filter(run=run, type="run.cancel_requested").exists()
    rows = list(
        RefusedAction.objects.values_list("actor", "channel", "status_code", "code", "target")
    )
    assert rows == [("user:bob", "console", 403, "forbidden", f"run:{run.pk}")]


def test_an_anonymous_refused_post_under_asgi_is_not_audited(actors):
    run = start_room_temperature("T-anon")
    client = AsyncClient(enforce_csrf_checks=True)
    response = async_to_sync(client.post)(reverse("console:cancel", args=[run.pk]), {"reason": "x"})
    assert response.status_code == 403
    assert not RefusedAction.objects.exists()
