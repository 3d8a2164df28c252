"""What the API would otherwise ignore is refused on every endpoint, before anything
runs: a query parameter the endpoint does not take (400 ``unknown_parameter``: a
``request_id`` in the query string would leave a signal silently not idempotent) and a
body that is not sent as JSON (415 ``unsupported_media_type``: a form or text body would
be read as JSON anyway). Nothing is written."""

import re

import pytest

import tests.workflows.signalled  # noqa: F401 - registers the workflow
from apitokens.services import create_token
from runs.api.app import api
from runs.engine.control.lifecycle import start_run
from runs.models import Approval, Step
from tests.support.in_process import actors, clients, fast_passwords  # noqa: F401
from tests.support.written import written_state

pytestmark = pytest.mark.django_db

#: Bodies that are not sent as JSON: text, a form, no Content-Type at all, a type that
#: only starts like JSON's.
NOT_JSON = ["text/plain", "application/x-www-form-urlencoded", "", "application/jsonl"]


def _endpoints():
    """``[(method, path template)]`` of every operation in the API's OpenAPI document
    (paths from ``/api/v1/``)."""
    paths = api.get_openapi_schema()["paths"]
    return [(method.upper(), path) for path, ops in paths.items() for method in ops]


@pytest.fixture
def filled(actors):  # noqa: F811
    """``(fill(path template) -> URL, auth headers)`` naming real rows, so a refusal
    comes from the gate, not from a missing run."""
    run = start_run("signalled", thread_id="gates", input={})
    step = Step.objects.filter(run=run).first()
    approval = Approval.objects.create(run=run, step=step, question="ship it?")
    values = {
        "run_id": run.pk,
        "approval_id": approval.pk,
        "step_id": step.pk,
        "attempt": 1,
        "name": "reading",
        "hook": "payments",
        "call_id": "c1",
        "thread_id": "gates",
        "step_name": step.name,
    }
    _, token = create_token(actors["bob"])

    def fill(template):
        return re.sub(r"{(\w+)}", lambda m: str(values[m.group(1)]), template)

    return fill, {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_IDEMPOTENCY_KEY": "gate-1"}


def test_every_endpoint_refuses_a_query_parameter_it_does_not_take(filled, clients):  # noqa: F811
    fill, headers = filled
    client = clients["bob"]
    endpoints = _endpoints()
    assert len(endpoints) >= 25  # every operation, not an empty list
    before = written_state()
    answers = {}
    for method, template in endpoints:
        # A signal's idempotency key belongs in its header; here it would be ignored.
        url = fill(template) + "?request_id=k-1&limit=5"
        body = "{}" if method in ("POST", "PUT", "PATCH") else ""
        response = client.generic(method, url, body, content_type="application/json", **headers)
        body = response.json()
        answers[(method, template)] = (response.status_code, body["code"], list(body["errors"]))
    expected = {key: (400, "unknown_parameter", ["request_id"]) for key in answers}
    assert answers == expected
    assert written_state() == before

    # A parameter the endpoint takes still works.
    listed = client.get("/api/v1/runs?limit=5", **headers)
    assert listed.status_code == 200, listed.content


def test_every_endpoint_that_takes_a_body_refuses_one_not_sent_as_json(filled, clients):  # noqa: F811
    fill, headers = filled
    client = clients["bob"]
    posts = [template for method, template in _endpoints() if method == "POST"]
    assert len(posts) >= 15
    before = written_state()
    answers = {}
    for template in posts:
        for content_type in NOT_JSON:
            response = client.generic(
                "POST", fill(template), b'{"reason": "r"}', content_type, **headers
            )
            answers[(template, content_type)] = (response.status_code, response.json()["code"])
    assert set(answers.values()) == {(415, "unsupported_media_type")}, answers
    assert written_state() == before

    # JSON with parameters, in any case, is JSON; a request without a body needs no type.
    run_id = fill("{run_id}")
    for n, content_type in enumerate(("application/json; charset=utf-8", "Application/JSON")):
        signalled = client.generic(
            "POST",
            f"/api/v1/runs/{run_id}/signals/reading",
            b'{"celsius": 1}',
            content_type,
            **{**headers, "HTTP_IDEMPOTENCY_KEY": f"gate-json-{n}"},
        )
        assert signalled.status_code == 200, signalled.content
    bare = client.generic("POST", f"/api/v1/runs/{run_id}/signals/nothing", b"", "", **headers)
    # It reached the engine, which knows no such signal.
    assert (bare.status_code, bare.json()["code"]) == (422, "unknown_signal"), bare.content
