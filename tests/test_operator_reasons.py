"""One rule for every operator action whose event records a reason (cancel, pause,
resume, retry, raise budget, replay, resolve a takeover): a blank reason is refused
with ``reason_required`` naming ``reason``, by the engine and so by every channel
(API, CLI, console), and nothing changes."""

import json

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from apitokens.services import create_token
from approvals.services import resolve_takeover
from runs.console.roles import setup_roles
from runs.engine.control.cancel import request_cancel
from runs.engine.control.lifecycle import pause_run, retry_step, start_run
from runs.engine.control.preconditions import run_etag
from runs.engine.control.refusals import MAX_REASON_CHARS, REASONED_ACTIONS, ControlError
from runs.engine.control.replay import bulk_replay, replay_run
from runs.engine.control.rewind import resume_from_checkpoint
from runs.engine.effects.budget import raise_budget
from runs.models import Event, Run, Takeover

pytestmark = pytest.mark.django_db

BLANKS = ["", "   ", "\n\t"]


@pytest.fixture
def run():
    return start_run(
        "room_temperature",
        thread_id="t-reason",
        input={"question": "How warm is it?"},
        budget={"model_calls": 3},
    )


ENGINE_ACTIONS = {
    "cancel": lambda run, why: request_cancel(run, actor="cli", reason=why),
    "pause": lambda run, why: pause_run(run, actor="cli", reason=why),
    "resume": lambda run, why: resume_from_checkpoint(run, "start", actor="cli", reason=why),
    "retry": lambda run, why: retry_step(run, actor="cli", reason=why),
    "budget": lambda run, why: raise_budget(run, actor="cli", add_model_calls=1, reason=why),
    "replay": lambda run, why: replay_run(run, actor="cli", reason=why),
    "resolve": lambda run, why: resolve_takeover(
        Takeover(run=run), action="retry", actor="cli", reason=why
    ),
}


def test_the_rule_covers_every_reasoned_action():
    assert set(ENGINE_ACTIONS) == set(REASONED_ACTIONS)


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize("action", sorted(ENGINE_ACTIONS))
def test_the_engine_refuses_a_blank_reason_and_changes_nothing(run, action, blank):
    before = (run_etag(run), Event.objects.filter(run=run).count(), Run.objects.count())
    with pytest.raises(ControlError) as refused:
        ENGINE_ACTIONS[action](run, blank)
    assert (refused.value.code, list(refused.value.errors)) == ("reason_required", ["reason"])
    run.refresh_from_db()
    assert (run_etag(run), Event.objects.filter(run=run).count(), Run.objects.count()) == before


@pytest.mark.parametrize("action", sorted(ENGINE_ACTIONS))
def test_the_engine_refuses_a_reason_over_the_limit_whole_and_changes_nothing(run, action):
    before = (run_etag(run), Event.objects.filter(run=run).count(), Run.objects.count())
    with pytest.raises(ControlError) as refused:
        ENGINE_ACTIONS[action](run, "r" * (MAX_REASON_CHARS + 1))
    assert (refused.value.code, list(refused.value.errors)) == ("invalid_input", ["reason"])
    assert "at most 2000 characters (it has 2001)" in str(refused.value)
    run.refresh_from_db()
    assert (run_etag(run), Event.objects.filter(run=run).count(), Run.objects.count()) == before
    ENGINE_ACTIONS["cancel"](run, "r" * MAX_REASON_CHARS)  # the limit itself is taken
    assert Run.objects.get(pk=run.pk).cancel_reason == "r" * MAX_REASON_CHARS


def test_the_cli_and_the_api_refuse_a_reason_over_the_limit(run):
    long = "r" * (MAX_REASON_CHARS + 1)
    with pytest.raises(CommandError, match=r"at most 2000 characters.*\[invalid_input\]"):
        call_command("runs", "cancel", str(run.pk), "--reason", long)
    schema = Client().get("/api/v1/openapi.json").json()["components"]["schemas"]
    for name in ("CancelIn", "ResumeIn", "RetryIn", "BudgetRaiseIn", "ReplayIn", "BulkReplayIn"):
        assert schema[name]["properties"]["reason"]["maxLength"] == MAX_REASON_CHARS, name
    assert Run.objects.get(pk=run.pk).status == "PENDING"


def test_bulk_replay_refuses_a_blank_reason(run):
    with pytest.raises(ControlError) as refused:
        bulk_replay(Run.objects.all(), actor="cli", reason=" ")
    assert refused.value.code == "reason_required"


def test_the_api_requires_a_reason_on_every_reasoned_action():
    schema = Client().get("/api/v1/openapi.json").json()
    components = schema["components"]["schemas"]
    bodies = {
        "/api/v1/runs/{run_id}/cancel": "CancelIn",
        "/api/v1/runs/{run_id}/resume": "ResumeIn",
        "/api/v1/runs/{run_id}/retry": "RetryIn",
        "/api/v1/runs/{run_id}/budget": "BudgetRaiseIn",
        "/api/v1/runs/{run_id}/replay": "ReplayIn",
        "/api/v1/replays": "BulkReplayIn",
    }
    for path, name in bodies.items():
        assert name in json.dumps(schema["paths"][path]["post"]["requestBody"]), path
        assert "reason" in components[name]["required"], name
        assert components[name]["properties"]["reason"]["minLength"] == 1, name


def test_an_api_resume_without_a_reason_is_refused(run):
    user = User.objects.create_user("olga", is_staff=True)
    user.groups.add(setup_roles()["operator"])
    _, raw = create_token(user)
    Run.objects.filter(pk=run.pk).update(owner=user)
    run.refresh_from_db()
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    for body in (
        {"checkpoint": "start"},
        {"checkpoint": "start", "reason": ""},
        {"checkpoint": "start", "reason": "  "},
    ):
        response = client.post(
            f"/api/v1/runs/{run.pk}/resume",
            json.dumps(body),
            content_type="application/json",
            HTTP_IF_MATCH=run_etag(run),
        )
        assert response.status_code == 422, response.content
        assert "reason" in response.json()["errors"]
    assert not Event.objects.filter(run=run, type="run.resumed_from_checkpoint").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("resume", "{run}", "--from", "start"),
        ("resume", "{run}", "--from", "start", "--reason", " "),
        ("budget", "{run}", "--add-model-calls", "1"),
    ],
)
def test_the_cli_refuses_a_resume_or_budget_raise_without_a_reason(run, args):
    before = (run_etag(run), Event.objects.filter(run=run).count())
    with pytest.raises(CommandError, match="reason_required"):
        call_command("runs", *[a.format(run=run.pk) for a in args])
    run.refresh_from_db()
    assert (run_etag(run), Event.objects.filter(run=run).count()) == before


def test_a_dry_run_resume_needs_no_reason(run, capsys):
    call_command("runs", "resume", str(run.pk), "--from", "start", "--dry-run")
    assert "dry run" in capsys.readouterr().out
