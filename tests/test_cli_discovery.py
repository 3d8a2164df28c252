"""A CLI a newcomer can discover: help text on every argument of every command, the
valid names listed for an unknown one, and ``runs list``, ``workflows``, ``workers``."""

import argparse
import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import (
    call_command,
    execute_from_command_line,
    get_commands,
    load_command_class,
)
from django.core.management.base import CommandError
from django.db import connections
from django.db.models.functions import Now

from runs.engine.control.lifecycle import start_run
from runs.engine.state.clock import db_now
from runs.models import Run, Step, WorkerProcess
from runs.states import StepStatus
from tests.support.command_line import DJANGO_OPTIONS, our_commands, parsers_of
from tests.support.states import arrange


@pytest.mark.parametrize("name", our_commands())
def test_every_argument_of_every_command_has_help(name):
    command = load_command_class(get_commands()[name], name)
    parser = command.create_parser("manage.py", name)
    missing = []
    for path, sub in parsers_of(parser, name):
        for action in sub._actions:
            if action.dest in DJANGO_OPTIONS or isinstance(action, argparse._SubParsersAction):
                continue
            if not (action.help or "").strip():
                missing.append(f"{path}: {action.option_strings or action.dest}")
    assert not missing, "arguments without help text:\n" + "\n".join(missing)


@pytest.mark.django_db
def test_runs_start_names_the_registered_workflows_for_an_unknown_one():
    with pytest.raises(CommandError) as caught:
        call_command("runs", "start", "nonexist", "--thread", "T")
    assert "registered workflows: " in str(caught.value)
    assert "room_temperature" in str(caught.value) and "dim_lights" in str(caught.value)


def test_workflows_lists_names_versions_steps_and_descriptions():
    out = StringIO()
    call_command("workflows", "--json", stdout=out)
    rows = {row["name"]: row for row in json.loads(out.getvalue())}
    assert rows["room_temperature"]["version"] == 1
    assert [s["name"] for s in rows["room_temperature"]["steps"]] == [
        "plan",
        "read_temperature",
        "reply",
    ]
    assert rows["dim_lights"]["input"] == {"request": "str"}
    assert rows["weekly_report"]["description"]
    out = StringIO()
    call_command("workflows", "weekly_report", stdout=out)
    assert "approve_publication (approval)" in out.getvalue()
    assert "publish (not compensable)" in out.getvalue()
    out = StringIO()
    call_command("workflows", "triage_demo", stdout=out)
    assert "triage (child runs of triage_ticket)" in out.getvalue()
    out = StringIO()
    call_command("workflows", "fanout_demo", stdout=out)
    assert "steps: fetch (map: one branch per item) -> combine" in out.getvalue()
    out = StringIO()
    call_command("workflows", "order_followup", stdout=out)
    assert "await_payment (waits for signal payment)" in out.getvalue()
    with pytest.raises(CommandError, match="registered workflows: .*room_temperature"):
        call_command("workflows", "nope")


def test_workflows_leaves_internal_ones_out_unless_asked():
    out = StringIO()
    call_command("workflows", stdout=out)
    listed = out.getvalue()
    assert "bench_hold" not in listed and "bench_noop" not in listed
    assert "room_temperature@1" in listed
    out = StringIO()
    call_command("workflows", "--all", "--json", stdout=out)
    internal = {r["name"] for r in json.loads(out.getvalue()) if r["internal"]}
    # Test modules may have registered internal workflows of their own in this process.
    assert {"bench_agent", "bench_hold", "bench_noop", "bench_wait"} <= internal
    assert not any(f"{name}@" in listed for name in internal)
    out = StringIO()
    call_command("workflows", "bench_hold", stdout=out)
    assert "bench_hold@1" in out.getvalue()


@pytest.mark.django_db
def test_runs_list_filters_like_the_console():
    waiting = start_run("room_temperature", thread_id="A", input={"question": "warm?"})
    other = start_run("dim_lights", thread_id="B", input={"request": "dim it"})
    arrange(Run.objects.filter(pk=other.pk), status="PAUSED")
    out = StringIO()
    call_command("runs", "list", "--json", stdout=out)
    listed = json.loads(out.getvalue())
    assert listed["count"] == 2
    assert [r["run_id"] for r in listed["runs"]] == [str(other.pk), str(waiting.pk)]

    out = StringIO()
    call_command("runs", "list", "--status", "PAUSED", "--json", stdout=out)
    assert [r["run_id"] for r in json.loads(out.getvalue())["runs"]] == [str(other.pk)]
    out = StringIO()
    call_command("runs", "list", "--workflow", "room_temperature", "--thread", "A", stdout=out)
    assert str(waiting.pk) in out.getvalue() and "1 runs match" in out.getvalue()
    out = StringIO()
    call_command("runs", "list", "--q", str(other.pk)[:8], "--json", stdout=out)
    assert json.loads(out.getvalue())["count"] == 1
    with pytest.raises(CommandError, match="invalid_filter"):
        call_command("runs", "list", "--created-after", "yesterday")


@pytest.mark.django_db
def test_workers_shows_who_holds_which_step_and_the_lease_left():
    run = start_run("room_temperature", thread_id="W", input={"question": "warm?"})
    WorkerProcess.objects.create(worker_id="host:7:abc", host="host", pid=7, mode="db")
    step = Step.objects.get(run=run)
    arrange(
        Step.objects.filter(pk=step.pk),
        status=StepStatus.RUNNING,
        owner="host:7:abc",
        attempt=1,
        lease_until=db_now() + timedelta(seconds=25),
        heartbeat_at=Now(),
    )
    out = StringIO()
    call_command("workers", "--json", stdout=out)
    [worker] = json.loads(out.getvalue())["live"]
    [held] = worker["holds"]
    assert (held["run_id"], held["step"], held["attempt"]) == (str(run.pk), "plan", 1)
    assert 0 < held["lease_left_s"] <= 25
    out = StringIO()
    call_command("workers", stdout=out)
    assert f"holds {run.pk} room_temperature.plan attempt 1, lease" in out.getvalue()


@pytest.mark.django_db
def test_an_unknown_user_is_answered_with_the_users_who_may_act():
    from runs.console.roles import setup_roles

    groups = setup_roles()
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("bob").groups.add(groups["operator"])
    get_user_model().objects.create_user("vic").groups.add(groups["viewer"])
    run = start_run("room_temperature", thread_id="U", input={"question": "warm?"})
    with pytest.raises(CommandError) as caught:
        call_command(
            "runs", "resolve", str(run.pk), "--step", "plan", "--outcome", "done",
            "--evidence", "seen", "--as", "alice",
        )  # fmt: skip
    message = str(caught.value)
    assert "[unknown_user]; users holding runs.operate_run: bob (create one" in message
    assert "vic" not in message


@pytest.mark.django_db
def test_an_unknown_approval_id_is_answered_with_the_pending_ones():
    from django.contrib.auth import get_user_model

    from runs.console.roles import setup_roles

    get_user_model().objects.create_user("carol").groups.add(setup_roles()["approver"])
    with pytest.raises(CommandError, match=r"no approval 99 \[unknown_approval\]; pending"):
        call_command("approvals", "decide", "99", "approve", "--as", "carol")


@pytest.fixture
def failing_check():
    """A registered system check that always reports an error, removed afterwards."""
    from django.core import checks

    def broken(app_configs=None, **kwargs):
        return [checks.Error("the code is broken", id="tests.E001")]

    checks.register(broken)
    yield
    checks.registry.registry.registered_checks.discard(broken)


@pytest.mark.django_db
def test_operator_commands_skip_the_system_checks_and_process_starters_run_them(
    failing_check, capsys, monkeypatch
):
    # A command run from the command line closes every connection at its end, which
    # would drop the test's in-memory database.
    monkeypatch.setattr(connections, "close_all", lambda: None)
    execute_from_command_line(["manage.py", "runs", "list", "--json"])
    assert json.loads(capsys.readouterr().out)["runs"] == []
    for name in ("workflows", "workers", "states", "approvals list", "api_token list"):
        execute_from_command_line(["manage.py", *name.split()])
        assert "the code is broken" not in capsys.readouterr().err
    # The processes a deployment starts refuse to, before doing anything.
    for name in ("worker", "sweeper", "serve", "demo", "migrate"):
        with pytest.raises(SystemExit) as stopped:
            execute_from_command_line(["manage.py", name])
        assert stopped.value.code == 1
        assert "tests.E001" in capsys.readouterr().err, name
    assert Run.objects.count() == 0
