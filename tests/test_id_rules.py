"""One id rule, three faces: an ill-formed id of each kind (run, approval, takeover,
step, attempt, artifact, API token, stored value) names nothing, so the CLI and the
console answer it with the kind's ``unknown_*`` code, as they answer a well-formed id
that names no row, and the API answers both 404 ``not_found``; nothing is written
(``runs.engine.rules.IDS``)."""

import re
from urllib.parse import quote

import pytest

import tests.workflows.signalled  # noqa: F401 - registers the workflow
from apitokens.services import create_token
from runs.engine.control.lifecycle import start_run
from runs.engine.rules import IDS, MAX_ID, parse_id
from runs.models import Approval, Step, Takeover
from tests.support.in_process import actors, clients, fast_passwords  # noqa: F401
from tests.support.written import written_state

pytestmark = pytest.mark.django_db

#: Whole-number ids that name nothing because they cannot be one: letters, a sign, a
#: fraction, a blank, another script's digit, zero, one past the largest id.
ILL_FORMED_NUMBERS = ["x", "12x", "-1", "1.5", " 7", "\u0663", "0", str(MAX_ID + 1)]
#: Run ids that cannot be one: not hex, a prefix (a whole id in a path), one digit too
#: many, another script's digit.
ILL_FORMED_RUN_IDS = [
    "zzz",
    "0badc0de",
    "0badc0de-0000-4000-8000-00000000000g",
    "0badc0de-0000-4000-8000-0000000000001",
    "0badc0de-0000-4000-8000-00000000000\u0663",
]
#: A well-formed id of each kind that names no row (an attempt without a log is a page
#: of its own on the console, so it has none here).
UNKNOWN = {
    "run": "0badc0de-0000-4000-8000-000000000000",
    "approval": "999999",
    "takeover": str(MAX_ID),
    "step": "999999",
    "artifact": "999999",
    "token": "999999",
    "value": "999999",
}


def _cli(manage, *args) -> str:
    status, _, err = manage(*args)
    assert status == 1 and len(err.splitlines()) == 1, (args, status, err)
    return re.findall(r"\[([a-z_]+)\]", err)[-1]


def _console(response) -> str:
    assert response.status_code == 404, response.content[:300]
    code = response.refusal_code
    assert f"[{code}]".encode() in response.content, response.content[:300]
    return code


def _api(response) -> str:
    assert response.status_code == 404, response.content[:300]
    return response.json()["code"]


def _faces(kind, run, step, clients, manage, token, carol_token):  # noqa: F811
    """``{face: send(id text) -> the code it answered}`` for each face taking ``kind``."""
    bob, carol = clients["bob"], clients["carol"]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def api_post(path, body, who_token=token):
        return _api(
            bob.post(
                "/api/v1" + path,
                body,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {who_token}",
                HTTP_IF_MATCH='"1.1.00000000"',  # an action's precondition: no run has it
            )
        )

    def q(value):
        return quote(value, safe="")

    log = f"/runs/{run.pk}/steps/{step.pk}/attempts"
    faces = {
        "run": {
            "cli status": lambda x: _cli(manage, "runs", "status", x),
            "cli cancel": lambda x: _cli(manage, "runs", "cancel", x, "--reason", "r"),
            "console page": lambda x: _console(bob.get(f"/runs/{q(x)}/")),
            "console cancel": lambda x: _console(
                bob.post(f"/runs/{q(x)}/cancel/", {"reason": "r"})
            ),
            "console bulk": lambda x: _console(
                bob.post("/runs/bulk/", {"action": "cancel", "run": [str(run.pk), x]})
            ),
            "api read": lambda x: _api(bob.get(f"/api/v1/runs/{q(x)}", **auth)),
            "api cancel": lambda x: api_post(f"/runs/{q(x)}/cancel", {"reason": "r"}),
        },
        "approval": {
            "cli": lambda x: _cli(manage, "approvals", "decide", x, "approve", "--as", "carol"),
            "console": lambda x: _console(
                carol.post(f"/approvals/{q(x)}/decide/", {"decision": "approve"})
            ),
            "api": lambda x: api_post(
                f"/approvals/{q(x)}/decide", {"decision": "approve"}, carol_token
            ),
        },
        "takeover": {
            "cli claim": lambda x: _cli(manage, "approvals", "claim", x, "--as", "bob"),
            "cli resolve": lambda x: _cli(
                manage, "approvals", "resolve", x, "cancel", "--reason", "r"
            ),
            "console": lambda x: _console(bob.post(f"/takeovers/{q(x)}/claim/")),
        },
        "step": {
            "console verify": lambda x: _console(bob.post(f"/unknowns/{q(x)}/verify/")),
            "console log": lambda x: _console(
                bob.get(f"/runs/{run.pk}/steps/{q(x)}/attempts/1/log/")
            ),
            "api log": lambda x: _api(
                bob.get(f"/api/v1/runs/{run.pk}/steps/{q(x)}/attempts/1/log", **auth)
            ),
        },
        "attempt": {
            "console": lambda x: _console(bob.get(f"{log}/{q(x)}/log/")),
            "api": lambda x: _api(bob.get(f"/api/v1{log}/{q(x)}/log", **auth)),
        },
        "artifact": {
            "console": lambda x: _console(bob.get(f"/artifacts/{q(x)}/download/")),
        },
        "token": {
            "cli": lambda x: _cli(manage, "api_token", "revoke", x),
            "console": lambda x: _console(bob.post(f"/tokens/{q(x)}/revoke/")),
        },
        "value": {
            "console": lambda x: _console(bob.get(f"/runs/{run.pk}/values/message/{q(x)}/")),
        },
    }
    return faces[kind]


@pytest.mark.parametrize("kind", list(IDS))
def test_an_ill_formed_or_unknown_id_gets_its_kinds_one_code_on_every_face(
    kind,
    actors,  # noqa: F811
    clients,  # noqa: F811
    manage_in_process,
):
    run = start_run("signalled", thread_id=f"ids-{kind}", input={})
    step = Step.objects.filter(run=run).first()
    Approval.objects.create(run=run, step=step, question="ship it?")
    Takeover.objects.create(run=run, step=step, cause="operator_request", reason="look")
    _, token = create_token(actors["bob"])
    _, carol_token = create_token(actors["carol"])
    faces = _faces(kind, run, step, clients, manage_in_process, token, carol_token)
    values = ILL_FORMED_RUN_IDS if IDS[kind].uuid else ILL_FORMED_NUMBERS
    values = [*values, *([UNKNOWN[kind]] if kind in UNKNOWN else [])]
    before = written_state(tokens=True)

    answers = {}
    for value in values:
        assert kind in UNKNOWN and value == UNKNOWN[kind] or parse_id(value, kind) is None
        for face, send in faces.items():
            answers[(value, face)] = send(value)
    code = IDS[kind].code
    expected = {key: "not_found" if key[1].startswith("api") else code for key in answers}
    assert answers == expected
    assert written_state(tokens=True) == before


def test_every_id_in_a_url_path_is_parsed_by_its_kinds_converter():
    from django.urls import URLPattern, URLResolver, get_resolver
    from django.urls.converters import IntConverter, UUIDConverter

    def walk(patterns, prefix=""):
        for item in patterns:
            route = prefix + str(item.pattern)
            yield route, getattr(item.pattern, "converters", {})
            if isinstance(item, URLResolver):
                yield from walk(item.url_patterns, route)
            else:
                assert isinstance(item, URLPattern)

    # The console's and the API's paths (the admin's are Django's own pages).
    typed = [
        (route, name)
        for route, converters in walk(get_resolver().url_patterns)
        if not route.startswith("admin/")
        for name, converter in converters.items()
        if isinstance(converter, IntConverter | UUIDConverter)
    ]
    # Django's own would not match an ill-formed id: a 404 without the kind's code.
    assert typed == []
