"""What the console does with input it cannot use: NUL characters and lone surrogates
(refused with 400 by every page and form before anything is written, on SQLite and
PostgreSQL alike), budget amounts out of range (400, the engine's one budget check),
and forms rendered before the run changed (409 ``run_changed``)."""

import json
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from apitokens.models import ApiToken
from runs.console.access import form_version
from runs.engine.control.lifecycle import ControlError
from runs.engine.effects.budget import MAX_AMOUNTS, amount_from_text, limit_errors, parse_amount
from runs.models import Approval, Event, RefusedAction, Run, Step, Takeover
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import start_room_temperature

pytestmark = pytest.mark.django_db(transaction=True)


def _forms(demo) -> list[tuple[str, str, list, dict]]:
    """``(client name, url name, url args, form)`` for every console form."""
    pending, paused = demo["pending"], demo["budget"]
    unknown = Step.objects.filter(run=demo["unknown"], status="UNKNOWN").first()
    approval = Approval.objects.filter(status="PENDING").first()
    takeover = Takeover.objects.filter(resolved_at__isnull=True).first()
    assert unknown is not None and approval is not None and takeover is not None

    def versioned(run, **form):
        return {"run_version": form_version(run), **form}

    return [
        ("bob", "console:cancel", [pending.pk], versioned(pending, reason="r")),
        ("bob", "console:redispatch", [pending.pk], versioned(pending, next="/")),
        ("bob", "console:retry", [demo["retries_exhausted"].pk], {"reason": "r"}),
        ("bob", "console:budget", [paused.pk], versioned(paused, reason="r", add_tokens="5")),
        ("bob", "console:resume_preview", [paused.pk], {"checkpoint": "start", "reason": "r"}),
        ("bob", "console:replay", [demo["succeeded"].pk], {"reason": "r"}),
        ("bob", "console:bulk_replay", [], {"reason": "r", "count": "1"}),
        ("bob", "console:bulk", [], {"action": "cancel", "run": str(pending.pk), "reason": "r"}),
        ("bob", "console:verify", [unknown.pk], {"note": "r"}),
        ("bob", "console:resolve", [unknown.pk], {"outcome": "done", "evidence": "r"}),
        ("carol", "console:decide", [approval.pk], {"decision": "approve", "comment": "r"}),
        ("bob", "console:claim", [takeover.pk], {"note": "r"}),
        ("bob", "console:resolve_takeover", [takeover.pk], {"action": "cancel", "reason": "r"}),
    ]


def _snapshot():
    return (
        Event.objects.count(),
        sorted(Run.objects.values_list("pk", "version", "generation", "status")),
        RefusedAction.objects.count(),
    )


def test_every_console_form_refuses_nul_with_400_and_writes_nothing(clients, demo):
    before = _snapshot()
    forms = _forms(demo)
    for who, name, args, form in forms:
        for field in form:
            if field == "run_version":
                continue
            bad = {**form, field: f"a\x00{form[field]}"}
            response = clients[who].post(reverse(name, args=args), bad)
            assert response.status_code == 400, (name, field, response.status_code)
            assert b"NUL character" in response.content, (name, field)
    assert _snapshot() == before


def test_the_tokens_page_refuses_a_nul_name(clients):
    response = clients["bob"].post("/tokens/", {"name": "a\x00b"})
    assert response.status_code == 400 and b"NUL character" in response.content
    assert not ApiToken.objects.exists()


def test_console_pages_refuse_nul_in_the_query(clients, demo):
    for name, args in [("console:runs", []), ("console:run", [demo["pending"].pk])]:
        response = clients["alice"].get(reverse(name, args=args), {"q": "a\x00b"})
        assert response.status_code == 400 and b"NUL character" in response.content


@pytest.mark.parametrize("escape", ["\\u0000", "\\ud800"])
def test_json_fields_refuse_nul_and_lone_surrogate_escapes(clients, demo, escape):
    before = _snapshot()
    unknown = Step.objects.filter(run=demo["unknown"], status="UNKNOWN").first()
    run = unknown.run
    response = clients["bob"].post(
        reverse("console:resolve", args=[unknown.pk]),
        {
            "run_version": form_version(run),
            "outcome": "done",
            "evidence": "checked",
            "result": json.dumps({"note": "a"}).replace('"a"', f'"a{escape}b"'),
        },
    )
    assert response.status_code == 400
    assert b"cannot be stored" in response.content
    assert _snapshot() == before


@pytest.mark.parametrize(
    "amounts",
    [
        {"add_model_calls": str(10**26)},
        {"add_model_calls": "1e26"},
        {"add_tool_calls": "1000001"},
        {"add_cost_usd": "1e400"},
        {"add_cost_usd": "NaN"},
        {"add_cost_usd": "0.0000001"},
        {"add_model_calls": "-5"},
        {"add_tokens": "abc"},
        {"add_model_calls": "0"},
    ],
)
def test_the_budget_form_answers_400_for_amounts_the_engine_refuses(clients, actors, amounts):
    run = start_room_temperature("T-budget", budget={"model_calls": 3, "cost_usd": "1"})
    before = _snapshot()
    response = clients["bob"].post(
        reverse("console:budget", args=[run.pk]),
        {"run_version": form_version(run), "reason": "more", **amounts},
    )
    assert response.status_code == 400
    assert b"invalid_budget" in response.content
    assert _snapshot() == before
    run.refresh_from_db()
    assert run.budget == {"model_calls": 3, "cost_usd": "1"}


def test_the_budget_form_acts_once_on_a_stale_run_version(clients, actors):
    run = start_room_temperature("T-stale", budget={"model_calls": 3})
    shown = form_version(run)
    url = reverse("console:budget", args=[run.pk])
    statuses = [
        clients["bob"]
        .post(url, {"run_version": shown, "reason": "more", "add_model_calls": "2"})
        .status_code
        for _ in range(4)
    ]
    assert statuses == [302, 409, 409, 409]
    run.refresh_from_db()
    assert run.budget == {"model_calls": 5}
    assert Event.objects.filter(run=run, type="budget.raised").count() == 1
    codes = list(RefusedAction.objects.values_list("status_code", "code"))
    assert codes == [(409, "run_changed")] * 3


def test_a_bare_version_number_is_stale(clients, actors):
    run = start_room_temperature("T-bare")
    response = clients["bob"].post(
        reverse("console:cancel", args=[run.pk]), {"run_version": run.version, "reason": "r"}
    )
    assert response.status_code == 409
    run.refresh_from_db()
    assert run.status == "PENDING"


def test_parse_amount_bounds():
    # The console's text is parsed into the number it spells first (amount_from_text).
    typed = amount_from_text("model_calls", "1000000")
    assert parse_amount("model_calls", typed) == MAX_AMOUNTS["model_calls"]
    assert parse_amount("cost_usd", "0.000001") == Decimal("0.000001")
    assert parse_amount("tokens", 10**12) == Decimal(10**12)
    for key, value in [
        ("model_calls", 1_000_001),
        ("model_calls", True),
        ("model_calls", 1.5),
        ("model_calls", amount_from_text("model_calls", "1e6")),
        ("model_calls", "5"),
        ("tool_calls", -1),
        ("tokens", 10**12 + 1),
        ("cost_usd", "1000000.000001"),
        ("cost_usd", "Infinity"),
        ("cost_usd", "1e400"),
    ]:
        with pytest.raises(ValueError):
            parse_amount(key, value)
    assert limit_errors(
        {"model_calls": 10**26, "tool_calls": "5", "tokens": True, "cost_usd": "1e400", "x": 1}
    ) == {
        "budget.model_calls": "must be at most 1000000",
        "budget.tool_calls": "must be a whole number",
        "budget.tokens": "must be a number, not true/false",
        "budget.cost_usd": "must be an amount in USD, e.g. 0.05",
        "budget.x": "unknown limit; use model_calls, tool_calls, cost_usd, tokens",
    }


def test_start_refuses_a_budget_over_the_limits(actors):
    with pytest.raises(ControlError) as refused:
        start_room_temperature("T-big", budget={"model_calls": 10**26})
    assert refused.value.code == "invalid_budget"
    assert not Run.objects.filter(thread__thread_id="T-big").exists()


def test_the_cli_refuses_a_budget_raise_over_the_limits(actors):
    run = start_room_temperature("T-cli", budget={"cost_usd": "1"})
    with pytest.raises(
        CommandError, match=r"--add-cost-usd must be at most 1000000 \[invalid_budget"
    ):
        call_command("runs", "budget", str(run.pk), "--add-cost", "1000001", "--reason", "x")
    run.refresh_from_db()
    assert run.budget == {"cost_usd": "1"}
