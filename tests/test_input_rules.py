"""One rule, three faces: each kind of bad value, sent to one verb (deliver a signal)
through the CLI, the console and the API, is refused with the same code naming the
same field, and nothing is written (``runs.engine.rules``)."""

import argparse
import json
import re
from urllib.parse import quote

import pytest
from django.urls import reverse

import tests.workflows.signalled  # noqa: F401 - registers the workflow
from agentops.authoring import RetryPolicy, Workflow, WorkflowDefinitionError
from apitokens.services import create_token
from runs.api.conditional import check_idempotency_key
from runs.api.errors import ApiError
from runs.cli import arguments
from runs.engine.control.lifecycle import start_run
from runs.engine.control.replay import check_rate
from runs.engine.durations import duration_problem
from runs.engine.effects.budget import amount_from_text, limit_errors, parse_amount
from runs.engine.effects.retry import retry_after_seconds
from runs.engine.errors import ControlError
from runs.engine.rules import (
    IDENTIFIERS,
    MAX_CHARS,
    MAX_REQUEST_ID_CHARS,
    MAX_VALUE_BYTES,
    NOT_FINITE,
    TRUE_FALSE,
    number_from_text,
    number_problem,
    request_id_problem,
)
from runs.models import Event, RefusedAction, Signal
from tests.support.in_process import actors, clients, fast_passwords  # noqa: F401
from tests.support.written import written_state

pytestmark = pytest.mark.django_db

LONG_KEY = "k" * 201

#: kind: (payload as JSON text, request id, the field the refusal names)
KINDS = {
    "nul": ('{"celsius": 1, "note": "a\\u0000b"}', None, "payload.note"),
    "lone_surrogate": ('{"celsius": 1, "note": "\\ud800"}', None, "payload.note"),
    "over_long": ('{"celsius": 1}', LONG_KEY, "request_id"),
    "bool_as_number": ('{"celsius": true}', None, "payload.celsius"),
    "nan": ('{"celsius": NaN}', None, "payload.celsius"),
    "wrong_shape": ("[1, 2]", None, "payload"),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_face_refuses_a_bad_value_with_one_code_and_writes_nothing(
    kind,
    actors,  # noqa: F811
    clients,  # noqa: F811
    manage_in_process,
):
    payload, request_id, field = KINDS[kind]
    run = start_run("signalled", thread_id=f"rules-{kind}", input={})
    events = Event.objects.filter(run=run).count()

    # An idempotency key has a code of its own on every face.
    code = "invalid_idempotency_key" if request_id else "invalid_input"
    key = ["--request-id", request_id] if request_id else []
    status, _, err = manage_in_process(
        "runs", "signal", str(run.pk), "reading", "--payload", payload, *key
    )
    assert status in (1, 2) and len(err.splitlines()) == 1, err
    assert f"[{code}]" in err, err

    console = clients["bob"].post(
        reverse("console:signal", args=[run.pk]),
        {"signal": "reading", "payload": payload, "request_id": request_id or "form-1"},
    )
    assert console.status_code == 400, console.content
    assert console.refusal_code == code

    _, token = create_token(actors["bob"])
    api = clients["bob"].post(
        f"/api/v1/runs/{run.pk}/signals/reading",
        payload,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        **({"HTTP_IDEMPOTENCY_KEY": request_id} if request_id else {}),
    )
    assert api.status_code == 422, api.content
    # The API takes the key from a header (1..200 printable ASCII characters).
    assert api.json()["code"] == code, api.json()
    if not request_id:
        assert field in api.json()["errors"], api.json()

    assert Signal.objects.filter(run=run).count() == 0
    assert Event.objects.filter(run=run).count() == events
    assert not RefusedAction.objects.exists()  # 4xx input errors are not audited refusals


def test_free_text_keeps_its_newlines_tabs_and_escapes():
    from runs.engine.rules import text_problem

    assert text_problem("line\n\tand \x1b[31mred\u202e") is None
    assert text_problem("line\nnext", identifier=True) is not None


def test_a_duplicate_key_is_refused_as_invalid_json_on_every_face(
    actors,  # noqa: F811
    clients,  # noqa: F811
    manage_in_process,
):
    run = start_run("signalled", thread_id="rules-dup", input={})
    events = Event.objects.filter(run=run).count()
    payload = '{"celsius": 1, "celsius": 2}'

    status, _, err = manage_in_process(
        "runs", "signal", str(run.pk), "reading", "--payload", payload
    )
    assert status == 2 and 'duplicate key "celsius"' in err and len(err.splitlines()) == 1, err

    console = clients["bob"].post(
        reverse("console:signal", args=[run.pk]),
        {"signal": "reading", "payload": payload, "request_id": "form-dup"},
    )
    assert console.status_code == 400 and b"duplicate key" in console.content

    _, token = create_token(actors["bob"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    api = clients["bob"].post(
        f"/api/v1/runs/{run.pk}/signals/reading", payload, content_type="application/json", **auth
    )
    assert (api.status_code, api.json()["code"]) == (400, "invalid_json"), api.content
    start = clients["bob"].post(
        "/api/v1/runs",
        '{"workflow": "signalled", "workflow": "room_temperature", "thread_id": "d", "input": {}}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="dup-1",
        **auth,
    )
    assert (start.status_code, start.json()["code"]) == (400, "invalid_json"), start.content
    assert "duplicate key" in start.json()["message"]

    assert Signal.objects.filter(run=run).count() == 0
    assert Event.objects.filter(run=run).count() == events


@pytest.mark.parametrize(
    ("input", "field"),
    [('{"items": 2, "delay_s": NaN}', "input.delay_s"), ('{"items": Infinity}', "input.items")],
)
def test_a_non_finite_number_is_named_as_such_not_as_out_of_range(
    actors,  # noqa: F811
    clients,  # noqa: F811
    manage_in_process,
    input,
    field,
):
    from runs.models import Run

    _, token = create_token(actors["bob"])
    api = clients["bob"].post(
        "/api/v1/runs",
        f'{{"workflow": "fanout_demo", "thread_id": "nan", "input": {input}}}',
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_IDEMPOTENCY_KEY=f"nan-{field}",
    )
    assert (api.status_code, api.json()["code"]) == (422, "invalid_input"), api.content
    assert "is not a JSON number" in api.json()["errors"][field], api.json()
    status, _, err = manage_in_process(
        "runs", "start", "fanout_demo", "--thread", "nan", "--input", input
    )
    assert status in (1, 2) and "is not a JSON number" in err, err
    assert not Run.objects.exists()


def _workflow_input(value):
    workflow = Workflow("numbers", 1, input_fields={"n": (int, float)}, input_ranges={"n": (0, 10)})
    return workflow.validate_input({"n": value}).get("n")


def _budget_limit(value):
    return limit_errors({"model_calls": value}).get("budget.model_calls")


def _cost(value):
    try:
        parse_amount("cost_usd", value)
    except ValueError as exc:
        return str(exc)
    return None


def _rate(value):
    try:
        check_rate(value)
    except ControlError as exc:
        return exc.message
    return None


def _refusal(build):
    def answer(value):
        try:
            build(value)
        except (ValueError, WorkflowDefinitionError, argparse.ArgumentTypeError) as exc:
            return str(exc)
        return None

    return answer


#: caller: (its answer to true, to NaN, to infinity); each says None to 2.
NUMBER_CALLERS = {
    "retry attempts": (_refusal(lambda v: RetryPolicy(max_attempts=v)), ("max_attempts",) * 3),
    "concurrency limit": (
        _refusal(lambda v: Workflow("n", 1, concurrency_key="k", concurrency_limit=v)),
        ("concurrency_limit",) * 3,
    ),
    "CLI number": (
        _refusal(lambda v: arguments.number()(str(v))),
        ("is not a number", "is not between", "is not between"),
    ),
    "workflow input": (_workflow_input, ("must be int or float", "must be from", "must be from")),
    "budget limit": (_budget_limit, ("not true/false", "whole number", "whole number")),
    "cost amount": (_cost, ("not true/false", "finite amount", "finite amount")),
    "duration": (duration_problem, ("not bool", "from 0 to", "from 0 to")),
    "Retry-After": (retry_after_seconds, (None, None, None)),
    "bulk replay rate": (_rate, ("replays per second",) * 3),
}


@pytest.mark.parametrize("caller", list(NUMBER_CALLERS))
def test_every_number_caller_refuses_true_false_nan_and_infinity_with_its_own_message(caller):
    answer, expected = NUMBER_CALLERS[caller]
    assert number_problem(True) == TRUE_FALSE and number_problem(float("nan")) == NOT_FINITE
    assert answer(2) in (None, 2.0), caller
    for value, wanted in zip((True, float("nan"), float("inf")), expected, strict=True):
        got = answer(value)
        assert got == wanted if wanted is None else wanted in got, (value, got)


def test_a_number_rule_takes_text_only_as_a_text_face_parsed_it():
    # "5" sent as JSON is text: the rules refuse it (the API hands them its values as
    # sent); typed on the CLI or the console it is parsed into the number first.
    assert [number_from_text(t) for t in ("5", " -3 ", "0.5", "1e3", "NaN", "x", "", 5)] == [
        5, -3, 0.5, 1000.0, "NaN", "x", "", 5,
    ]  # fmt: skip
    assert limit_errors({"model_calls": "5"}) == {"budget.model_calls": "must be a whole number"}
    assert limit_errors({"model_calls": 5, "cost_usd": "0.10"}) == {}
    with pytest.raises(ValueError, match="whole number"):
        parse_amount("tokens", "5")
    assert parse_amount("tokens", amount_from_text("tokens", " 5 ")) == 5
    assert amount_from_text("cost_usd", "0.10") == "0.10" and amount_from_text("tokens", " ") == 0
    with pytest.raises(ValueError, match="whole number"):
        parse_amount("tokens", amount_from_text("tokens", "1.5"))
    assert _rate("5") and _rate(True) and _rate(0) and check_rate(number_from_text("5")) == 5.0


#: key: (refused as a request id, refused as an Idempotency-Key header)
REQUEST_IDS = {
    "k-1": (False, False),
    "x" * MAX_REQUEST_ID_CHARS: (False, False),
    "x" * (MAX_REQUEST_ID_CHARS + 1): (True, True),
    " ": (True, True),
    "a\x00b": (True, True),
    "a b": (False, True),
    "café": (False, True),
}


@pytest.mark.parametrize("key", list(REQUEST_IDS))
def test_one_request_id_rule_serves_the_engine_and_the_idempotency_key_header(key):
    refused, refused_in_header = REQUEST_IDS[key]
    assert (request_id_problem(key) is not None) == refused
    assert (request_id_problem(key, header=True) is not None) == refused_in_header
    if refused_in_header:
        with pytest.raises(ApiError) as caught:
            check_idempotency_key(key)
        assert (caught.value.status, caught.value.code) == (422, "invalid_idempotency_key")
    else:
        check_idempotency_key(key)


#: kind of bad character or length: the value (``{limit}`` is the field's longest length)
BAD_IDENTIFIERS = {
    "nul": "a\x00b",
    "c0": "a\x01b",
    "del": "a\x7fb",
    "c1": "a\x9bb",
    "bidi": "a\u202eb",
    "lone_surrogate": "a\ud800b",
    "over_long": "{limit}",
}


def _cli_code(manage, *args) -> str:
    status, _, err = manage(*args)
    assert status in (1, 2) and len(err.splitlines()) == 1, err
    return re.findall(r"\[([a-z_]+)\]", err)[-1]


def _console_code(response) -> str:
    assert response.status_code == 400, response.content[:300]
    code = getattr(response, "refusal_code", None)
    return code or re.findall(rb"\[([a-z_]+)\]", response.content)[-1].decode()


def _api_code(response) -> str:
    assert response.status_code in (400, 422), response.content[:300]
    return response.json()["code"]


def _identifier_faces(field, run, token, client, manage):
    """``{face: send(bad value) -> the code it answered}`` for ``field``, on each face
    that takes it."""
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    etag = client.get(f"/api/v1/runs/{run.pk}", **auth)["ETag"]

    def api(path, body, **headers):
        return _api_code(
            client.post(path, body, content_type="application/json", **auth, **headers)
        )

    start = {"question": "warm?"}
    signal_url = f"/api/v1/runs/{run.pk}/signals"
    faces = {
        "thread_id": {
            "cli": lambda bad: _cli_code(
                manage, "runs", "start", "room_temperature", "--thread", bad, "--input", "{}"
            ),
            "cli message": lambda bad: _cli_code(manage, "runs", "message", "--thread", bad, "hi"),
            "api": lambda bad: api(
                "/api/v1/runs",
                {"workflow": "room_temperature", "thread_id": bad, "input": start},
                HTTP_IDEMPOTENCY_KEY=f"t-{len(bad)}-{ord(bad[1])}",
            ),
        },
        "request_id": {
            "cli": lambda bad: _cli_code(
                manage, "runs", "signal", str(run.pk), "reading", "--request-id", bad
            ),
            "console": lambda bad: _console_code(
                client.post(
                    reverse("console:signal", args=[run.pk]),
                    {"signal": "reading", "payload": '{"celsius": 1}', "request_id": bad},
                )
            ),
            "api": lambda bad: api(
                f"{signal_url}/reading", {"celsius": 1}, HTTP_IDEMPOTENCY_KEY=bad
            ),
        },
        "workflow": {
            "cli": lambda bad: _cli_code(manage, "runs", "start", bad, "--thread", "w"),
            "api": lambda bad: api(
                "/api/v1/runs",
                {"workflow": bad, "thread_id": "w", "input": {}},
                HTTP_IDEMPOTENCY_KEY=f"w-{len(bad)}-{ord(bad[1])}",
            ),
        },
        "signal": {
            "cli": lambda bad: _cli_code(manage, "runs", "signal", str(run.pk), bad),
            "console": lambda bad: _console_code(
                client.post(
                    reverse("console:signal", args=[run.pk]),
                    {"signal": bad, "payload": "{}", "request_id": "s-1"},
                )
            ),
            "api": lambda bad: api(f"{signal_url}/{quote(bad, safe='', errors='ignore')}", {}),
        },
        "checkpoint": {
            "cli": lambda bad: _cli_code(
                manage, "runs", "resume", str(run.pk), "--from", bad, "--reason", "r"
            ),
            "console": lambda bad: _console_code(
                client.post(
                    reverse("console:resume_preview", args=[run.pk]),
                    {"checkpoint": bad, "preview": "1"},
                )
            ),
            "api": lambda bad: api(
                f"/api/v1/runs/{run.pk}/resume",
                {"checkpoint": bad, "reason": "r"},
                HTTP_IF_MATCH=etag,
            ),
        },
        "step": {
            "api": lambda bad: api(
                f"/api/v1/runs/{run.pk}/steps/{quote(bad, safe='', errors='ignore')}/resolve",
                {"outcome": "done", "evidence": "e"},
                HTTP_IF_MATCH=etag,
            ),
            "cli": lambda bad: _cli_code(
                manage,
                "runs",
                "resolve",
                str(run.pk),
                "--step",
                bad,
                "--outcome",
                "done",
                "--evidence",
                "e",
            ),
        },
        "schedule": {
            "cli": lambda bad: _cli_code(
                manage, "schedules", "add", bad, "--workflow", "signalled", "--every", "60"
            ),
            "api": lambda bad: api(
                "/api/v1/schedules", {"name": bad, "workflow": "signalled", "every": 60}
            ),
        },
        "token_name": {
            "cli": lambda bad: _cli_code(manage, "api_token", "create", "bob", "--name", bad),
            "console": lambda bad: _console_code(
                client.post(reverse("apitokens:tokens"), {"name": bad})
            ),
        },
    }
    return faces[field]


@pytest.mark.parametrize("field", list(IDENTIFIERS))
def test_every_bad_character_and_length_of_an_identifier_gets_its_one_code_on_every_face(
    field,
    actors,  # noqa: F811
    clients,  # noqa: F811
    manage_in_process,  # noqa: F811
):
    from apitokens.models import ApiToken
    from runs.models import Message, Run, Schedule

    run = start_run("signalled", thread_id=f"ids-{field}", input={})
    _, token = create_token(actors["bob"])
    faces = _identifier_faces(field, run, token, clients["bob"], manage_in_process)
    rows = (
        Run.objects.count(),
        Event.objects.count(),
        Schedule.objects.count(),
        Message.objects.count(),
    )
    tokens = ApiToken.objects.count()

    answers = {}
    for kind, bad in BAD_IDENTIFIERS.items():
        bad = "x" * (IDENTIFIERS[field].limit + 1) if kind == "over_long" else bad
        for face, send in faces.items():
            # A form value or a URL path cannot carry a lone surrogate (not UTF-8).
            in_path = face == "api" and field in ("signal", "step")
            if kind == "lone_surrogate" and (face == "console" or in_path):
                continue
            answers[(kind, face)] = send(bad)
    assert set(answers.values()) == {IDENTIFIERS[field].code}, answers
    assert rows == (
        Run.objects.count(),
        Event.objects.count(),
        Schedule.objects.count(),
        Message.objects.count(),
    )
    assert ApiToken.objects.count() == tokens and Signal.objects.count() == 0


@pytest.mark.parametrize("field", ["reason", "evidence"])
def test_over_long_free_text_gets_the_engines_code_on_the_api_too(
    field,
    actors,  # noqa: F811
    clients,  # noqa: F811
):
    run = start_run("signalled", thread_id=f"long-{field}", input={})
    _, token = create_token(actors["bob"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    etag = clients["bob"].get(f"/api/v1/runs/{run.pk}", **auth)["ETag"]
    long = "x" * (MAX_CHARS[field] + 1)
    path, body = {
        "reason": (f"/api/v1/runs/{run.pk}/cancel", {"reason": long}),
        "evidence": (
            f"/api/v1/runs/{run.pk}/steps/wait/resolve",
            {"outcome": "done", "evidence": long},
        ),
    }[field]
    api = clients["bob"].post(
        path, body, content_type="application/json", HTTP_IF_MATCH=etag, **auth
    )
    assert (api.status_code, api.json()["code"]) == (422, "invalid_input"), api.content
    assert field in api.json()["errors"], api.json()


#: Counts a budget raise refuses, as the CLI, the console and the API send them.
BAD_COUNTS = {"true": "true", "-1": "-1", "1.5": "1.5", "1000001": "1000001", "NaN": "NaN"}
#: USD amounts a budget raise refuses.
BAD_COSTS = {"NaN": "NaN", "Infinity": "Infinity", "-1": "-1", "1e400": "1e400", "tiny": "1e-7"}


def _budget_case(flag, value):
    """A budget raise adding ``value`` (JSON text) through ``flag``'s field."""
    field = flag.removeprefix("--").replace("-", "_")
    return {
        "code": "invalid_budget",
        "cli": ("runs", "budget", "{run}", f"{flag}={value}", "--reason", "r"),
        "console": ("console:budget", "{run}", {"reason": "r", field: value}),
        "api": ("/runs/{run}/budget", f'{{"reason": "r", "{field}": {value}}}'),
    }


#: A JSON object one byte over the engine's largest value.
BIG_PAYLOAD = json.dumps({"celsius": 1, "note": ""}, separators=(",", ":"))
BIG_PAYLOAD = BIG_PAYLOAD.replace('""', '"' + "x" * (MAX_VALUE_BYTES + 1 - len(BIG_PAYLOAD)) + '"')

#: case: the code every face answers ("api_code" where the API's differs, as documented)
#: and the request of each face; "{run}" / "{approval}" name the arranged rows. A case
#: without "cli" (or "console") is a JSON value a text face cannot send (a number
#: sent as text, a reason that is a number) or an action that face does not offer.
FACE_CASES = {
    "blank reason, cancel": {
        "code": "reason_required",
        "cli": ("runs", "cancel", "{run}", "--reason", "   "),
        "console": ("console:cancel", "{run}", {"reason": "   "}),
        "api": ("/runs/{run}/cancel", '{"reason": "   "}'),
    },
    "blank reason, budget": {
        "code": "reason_required",
        "cli": ("runs", "budget", "{run}", "--add-model-calls", "1", "--reason", "   "),
        "console": ("console:budget", "{run}", {"reason": "   ", "add_model_calls": "1"}),
        "api": ("/runs/{run}/budget", '{"reason": "   ", "add_model_calls": 1}'),
    },
    **{f"budget count {k}": _budget_case("--add-model-calls", v) for k, v in BAD_COUNTS.items()},
    **{f"budget cost {k}": _budget_case("--add-cost-usd", v) for k, v in BAD_COSTS.items()},
    # A USD amount typed or sent as text is ASCII digits with an optional fraction.
    **{
        f"budget cost text {text!r}": {
            **_budget_case("--add-cost-usd", text),
            "api": ("/runs/{run}/budget", json.dumps({"reason": "r", "add_cost_usd": text})),
        }
        for text in ("5_0", "\u0663", "\uff15", "+5", "5.", ".5")
    },
    "budget cost JSON text with blanks": {
        "code": "invalid_budget",
        "api": ("/runs/{run}/budget", '{"reason": "r", "add_cost_usd": " 5 "}'),
    },
    "start budget cost text": {
        "code": "invalid_budget",
        "cli": ("runs", "start", "signalled", "--thread", "b", "--budget", '{"cost_usd": "5_0"}'),
        "api": (
            "/runs",
            '{"workflow": "signalled", "thread_id": "b", "input": {}, '
            '"budget": {"cost_usd": "5_0"}}',
        ),
    },  # fmt: skip
    "start budget true": {
        "code": "invalid_budget",
        "cli": ("runs", "start", "signalled", "--thread", "b", "--budget", '{"tool_calls": true}'),
        "api": (
            "/runs",
            '{"workflow": "signalled", "thread_id": "b", "input": {}, '
            '"budget": {"tool_calls": true}}',
        ),
    },  # fmt: skip
    "start budget NaN cost": {
        "code": "invalid_budget",
        "cli": ("runs", "start", "signalled", "--thread", "b", "--budget", '{"cost_usd": NaN}'),
        "api": (
            "/runs",
            '{"workflow": "signalled", "thread_id": "b", "input": {}, "budget": {"cost_usd": NaN}}',
        ),
    },  # fmt: skip
    "signal payload over the value limit": {
        "code": "invalid_input",
        "cli": ("runs", "signal", "{run}", "reading", "--payload", BIG_PAYLOAD),
        "console": ("console:signal", "{run}", {"signal": "reading", "payload": BIG_PAYLOAD}),
        "api": ("/runs/{run}/signals/reading", BIG_PAYLOAD),
    },
    "start input over the value limit": {
        "code": "invalid_input",
        "cli": ("runs", "start", "signalled", "--thread", "b", "--input", BIG_PAYLOAD),
        "api": (
            "/runs",
            f'{{"workflow": "signalled", "thread_id": "b", "input": {BIG_PAYLOAD}}}',
        ),
    },
    "malformed JSON": {
        "code": "invalid_json",
        "cli": ("runs", "signal", "{run}", "reading", "--payload", '{"celsius": '),
        "console": ("console:signal", "{run}", {"signal": "reading", "payload": '{"celsius": '}),
        "api": ("/runs/{run}/signals/reading", '{"celsius": '),
    },
    "duplicate key": {
        "code": "invalid_json",
        "cli": ("runs", "signal", "{run}", "reading", "--payload", '{"a": 1, "a": 2}'),
        "console": (
            "console:signal",
            "{run}",
            {"signal": "reading", "payload": '{"a": 1, "a": 2}'},
        ),
        "api": ("/runs/{run}/signals/reading", '{"a": 1, "a": 2}'),
    },
    "bogus decision": {
        "code": "invalid_decision",
        "cli": ("approvals", "decide", "{approval}", "maybe", "--as", "carol"),
        "console": ("console:decide", "{approval}", {"decision": "maybe"}),
        "api": ("/approvals/{approval}/decide", '{"decision": "maybe"}'),
    },
    # A JSON face takes a count as a JSON number only: "5" is text, refused by the
    # budget rule (the CLI and the console type text, so "5" is a count there).
    "budget count as JSON text": {
        "code": "invalid_budget",
        "api": ("/runs/{run}/budget", '{"reason": "r", "add_model_calls": "5"}'),
    },
    "start budget count as JSON text": {
        "code": "invalid_budget",
        "api": (
            "/runs",
            '{"workflow": "signalled", "thread_id": "b", "input": {}, '
            '"budget": {"tool_calls": "5"}}',
        ),
    },
    "start budget unknown limit": {
        "code": "invalid_budget",
        "cli": ("runs", "start", "signalled", "--thread", "b", "--budget", '{"bogus": 1}'),
        "api": (
            "/runs",
            '{"workflow": "signalled", "thread_id": "b", "input": {}, "budget": {"bogus": 1}}',
        ),
    },
    "start budget not an object": {
        "code": "invalid_budget",
        "cli": ("runs", "start", "signalled", "--thread", "b", "--budget", "[]"),
        "api": (
            "/runs",
            '{"workflow": "signalled", "thread_id": "b", "input": {}, "budget": []}',
        ),
    },
    # Every input field takes a JSON object: a run's input, a resume's patch, a
    # schedule's input.
    "start input not an object": {
        "code": "invalid_input",
        "cli": ("runs", "start", "signalled", "--thread", "b", "--input", "[]"),
        "api": ("/runs", '{"workflow": "signalled", "thread_id": "b", "input": "text"}'),
    },
    "start input missing": {
        "code": "invalid_input",
        "api": ("/runs", '{"workflow": "signalled", "thread_id": "b"}'),
    },
    "resume input patch not an object": {
        "code": "invalid_input",
        "cli": ("runs", "resume", "{run}", "--from", "x", "--input-patch", "[]", "--reason", "r"),
        "api": ("/runs/{run}/resume", '{"checkpoint": "x", "input_patch": [], "reason": "r"}'),
    },
    # A sent null is not an object: the engine would take it for a field left out.
    "resume input patch null": {
        "code": "invalid_input",
        "cli": ("runs", "resume", "{run}", "--from", "x", "--input-patch", "null", "--reason", "r"),
        "api": ("/runs/{run}/resume", '{"checkpoint": "x", "input_patch": null, "reason": "r"}'),
    },
    "schedule input null": {
        "code": "invalid_input",
        "cli": (
            "schedules",
            "add",
            "s",
            "--workflow",
            "signalled",
            "--every",
            "60",
            "--input",
            "null",
        ),
        "api": ("/schedules", '{"name": "s", "workflow": "signalled", "every": 60, "input": null}'),
    },
    "schedule every 0": {
        "code": "invalid_input",
        "cli": ("schedules", "add", "s", "--workflow", "signalled", "--every", "0"),
        "api": ("/schedules", '{"name": "s", "workflow": "signalled", "every": 0}'),
    },
    "schedule overlap unknown": {
        "code": "invalid_input",
        "cli": (
            "schedules",
            "add",
            "s",
            "--workflow",
            "signalled",
            "--every",
            "9",
            "--overlap",
            "x",
        ),
        "api": ("/schedules", '{"name": "s", "workflow": "signalled", "every": 9, "overlap": "x"}'),
    },
    "schedule catch-up window as text": {
        "code": "invalid_input",
        "cli": (
            "schedules",
            "add",
            "s",
            "--workflow",
            "signalled",
            "--every",
            "9",
            "--catchup-window",
            "a",
        ),
        "api": (
            "/schedules",
            '{"name": "s", "workflow": "signalled", "every": 9, "catchup_window": "a"}',
        ),
    },
    "schedule input not an object": {
        "code": "invalid_input",
        "cli": (
            "schedules",
            "add",
            "s",
            "--workflow",
            "signalled",
            "--every",
            "60",
            "--input",
            "7",
        ),
        "api": ("/schedules", '{"name": "s", "workflow": "signalled", "every": 60, "input": 7}'),
    },
    "missing reason, cancel": {
        "code": "reason_required",
        "cli": ("runs", "cancel", "{run}"),
        "console": ("console:cancel", "{run}", {}),
        "api": ("/runs/{run}/cancel", "{}"),
    },
    "missing reason, budget": {
        "code": "reason_required",
        "cli": ("runs", "budget", "{run}", "--add-model-calls", "1"),
        "console": ("console:budget", "{run}", {"add_model_calls": "1"}),
        "api": ("/runs/{run}/budget", '{"add_model_calls": 1}'),
    },
    "missing reason, retry": {
        "code": "reason_required",
        "api": ("/runs/{run}/retry", "{}"),
    },
    "reason not text": {
        "code": "invalid_input",
        "api": ("/runs/{run}/cancel", '{"reason": 5}'),
    },
    "missing evidence": {
        "code": "evidence_required",
        "api": ("/runs/{run}/steps/wait/resolve", '{"outcome": "done"}'),
    },
    "bulk replay rate as JSON text": {
        "code": "invalid_rate",
        "api": ("/replays", '{"reason": "r", "rate": "5", "dry_run": true}'),
    },
    "schedule every as JSON text": {
        "code": "invalid_input",
        "api": ("/schedules", '{"name": "s", "workflow": "signalled", "every": "5"}'),
    },
    "decision true": {
        "code": "invalid_decision",
        "cli": ("approvals", "decide", "{approval}", "true", "--as", "carol"),
        "console": ("console:decide", "{approval}", {"decision": "true"}),
        "api": ("/approvals/{approval}/decide", '{"decision": true}'),
    },
    "missing decision": {
        "code": "invalid_decision",
        "cli": ("approvals", "decide", "{approval}", "--as", "carol"),
        "console": ("console:decide", "{approval}", {}),
        "api": ("/approvals/{approval}/decide", "{}"),
    },
    "decision null": {
        "code": "invalid_decision",
        "api": ("/approvals/{approval}/decide", '{"decision": null}'),
    },
    "decision a number": {
        "code": "invalid_decision",
        "api": ("/approvals/{approval}/decide", '{"decision": 1}'),
    },
    "unknown signal": {
        "code": "unknown_signal",
        "cli": ("runs", "signal", "{run}", "nope", "--payload", "{}"),
        "console": ("console:signal", "{run}", {"signal": "nope", "payload": "{}"}),
        "api": ("/runs/{run}/signals/nope", "{}"),
    },
    "unknown run": {
        "code": "unknown_run",
        "api_code": "not_found",
        "cli": ("runs", "status", "0badc0de-0000-4000-8000-000000000000"),
        "console": ("console:run", "0badc0de-0000-4000-8000-000000000000", None),
        "api": ("/runs/0badc0de-0000-4000-8000-000000000000", None),
    },
    "unknown approval": {
        "code": "unknown_approval",
        "api_code": "not_found",
        "cli": ("approvals", "decide", "999999", "approve", "--as", "carol"),
        "console": ("console:decide", "999999", {"decision": "approve"}),
        "api": ("/approvals/999999/decide", '{"decision": "approve"}'),
    },
}

#: A code's HTTP status on the console and on the API.
CONSOLE_STATUS = {"unknown_run": 404, "unknown_approval": 404}
API_STATUS = {"invalid_json": 400, "not_found": 404}


@pytest.fixture
def arranged(actors):  # noqa: F811
    """A run of ``signalled`` waiting for its signal, with a model-call limit and a
    PENDING approval on its step (the engine refuses the bad values before it looks
    at either's state)."""
    from runs.models import Approval, Step

    # Carol's, so that her token sees its approval (bob, staff, sees every run).
    run = start_run(
        "signalled",
        thread_id="faces",
        input={},
        budget={"model_calls": 5},
        owner=actors["carol"],
    )
    approval = Approval.objects.create(
        run=run, step=Step.objects.filter(run=run).first(), question="ship it?"
    )
    return run, approval


@pytest.mark.parametrize("case", list(FACE_CASES))
def test_one_bad_value_gets_one_code_on_the_cli_the_console_and_the_api(
    case,
    arranged,
    actors,  # noqa: F811
    clients,  # noqa: F811
    manage_in_process,  # noqa: F811
):
    from runs.console.access import form_version
    from runs.engine.service import run_etag

    spec = FACE_CASES[case]
    code = spec["code"]
    run, approval = arranged
    names = {"{run}": str(run.pk), "{approval}": str(approval.pk)}

    def named(text):
        for name, value in names.items():
            text = text.replace(name, value)
        return text

    before = written_state()

    if "cli" in spec:
        status, _, err = manage_in_process(*map(named, spec["cli"]))
        assert status in (1, 2) and len(err.splitlines()) == 1, err
        assert f"[{code}]" in err, err

    if "console" in spec:
        url_name, target, data = spec["console"]
        client = clients["carol" if "decide" in url_name else "bob"]
        url = reverse(url_name, args=[named(target)])
        if data is None:
            console = client.get(url)
        else:
            console = client.post(url, {"run_version": form_version(run), **data})
        assert console.status_code == CONSOLE_STATUS.get(code, 400), console.content
        assert console.refusal_code == code and f"[{code}]".encode() in console.content

    path, body = spec["api"]
    _, token = create_token(actors["carol" if "approvals" in path else "bob"])
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_IF_MATCH": run_etag(run)}
    url = "/api/v1" + named(path)
    if body is None:
        api = clients["bob"].get(url, **headers)
    else:
        api = clients["bob"].post(url, body, content_type="application/json", **headers)
    api_code = spec.get("api_code", code)
    assert (api.status_code, api.json()["code"]) == (API_STATUS.get(api_code, 422), api_code), (
        api.content
    )

    assert written_state() == before
    assert not RefusedAction.objects.exists()  # 4xx input errors are not audited refusals


#: console action: (URL name, the raw form body after run_version, who posts it)
UNDECODABLE_FORMS = {
    "cancel reason": ("console:cancel", b"reason=a%ED%A0%80b", "bob"),
    "budget reason": ("console:budget", b"add_model_calls=1&reason=a%ED%A0%80b", "bob"),
    "decision comment": ("console:decide", b"decision=approve&comment=a%ED%A0%80b", "carol"),
    "field name": ("console:cancel", b"reason=ok&a%FF=1", "bob"),
}


@pytest.mark.parametrize("form", list(UNDECODABLE_FORMS))
def test_a_console_form_that_is_not_utf8_is_refused_whole(form, arranged, clients):  # noqa: F811
    from runs.console.access import form_version

    url_name, body, who = UNDECODABLE_FORMS[form]
    run, approval = arranged
    target = approval.pk if url_name == "console:decide" else run.pk
    before = written_state()
    response = clients[who].generic(
        "POST",
        reverse(url_name, args=[target]),
        b"run_version=" + form_version(run).encode() + b"&" + body,
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 400, response.content
    assert response.refusal_code == "invalid_input" and b"not valid UTF-8" in response.content
    assert written_state() == before
    if form == "field name":
        # A page's query string is read from its bytes too.
        page = clients[who].get("/runs/?q=a%ED%A0%80b")
        assert (page.status_code, page.refusal_code) == (400, "invalid_input")


def test_a_thread_message_over_its_limit_is_refused_whole(manage_in_process):  # noqa: F811
    from runs.engine.rules import MAX_CHARS
    from runs.models import Message, Run

    text = "x" * (MAX_CHARS["thread_message"] + 1)
    status, _, err = manage_in_process("runs", "message", "--thread", "long", text)
    assert status == 1 and "[invalid_message]" in err, err
    assert f"at most {MAX_CHARS['thread_message']} characters" in err
    assert not Message.objects.exists() and not Run.objects.exists()


def test_a_null_limit_is_no_limit_on_every_face(actors, clients, manage_in_process):  # noqa: F811
    from runs.models import Run

    budget = '{"model_calls": null, "tool_calls": 3}'
    status, out, err = manage_in_process(
        "runs", "start", "signalled", "--thread", "null-cli", "--budget", budget
    )
    assert status == 0, err
    _, token = create_token(actors["bob"])
    api = clients["bob"].post(
        "/api/v1/runs",
        f'{{"workflow": "signalled", "thread_id": "null-api", "input": {{}}, "budget": {budget}}}',
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert api.status_code == 201, api.content
    assert api.json()["budget"]["limits"] == {"tool_calls": 3}
    stored = dict(Run.objects.values_list("thread__thread_id", "budget"))
    assert stored == {"null-cli": {"tool_calls": 3}, "null-api": {"tool_calls": 3}}
