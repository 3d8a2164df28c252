"""A run is named by its whole id or by a unique prefix of it with at least 4 hex digits
(the console shows 8), by every CLI command that takes a run id and by the console's search; an
ambiguous prefix is answered with the candidates, on both databases' id storage."""

import argparse
import json
import uuid
from io import StringIO

import pytest
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError

from runs.engine.control.lifecycle import start_run
from runs.models import Run
from tests.support.in_process import actors, clients, device_dir, fast_passwords

__all__ = ["actors", "clients", "device_dir", "fast_passwords"]

OUR_APPS = {"runs", "approvals", "apitokens"}
TWINS = ["54196b65-1111-4000-8000-000000000001", "54196b65-2222-4000-8000-000000000002"]
LONER = "a0b1c2d3-0000-4000-8000-000000000003"


@pytest.fixture
def runs(monkeypatch):
    """Three runs: two whose ids share the prefix ``54196b65``, one alone."""
    ids = iter(uuid.UUID(v) for v in [*TWINS, LONER])
    # The field's default callable, as Django caches it for new rows.
    monkeypatch.setattr(Run._meta.get_field("id"), "_get_default", lambda: next(ids))
    made = [
        start_run("room_temperature", thread_id=f"P{i}", input={"question": "warm?"})
        for i in range(3)
    ]
    assert [str(r.pk) for r in made] == [*TWINS, LONER]
    return made


def _run_id_commands():
    """``(argv before the run id, argv after it)`` for every command and subcommand of
    ours that takes a run id (a ``run_id`` positional or a ``--run`` option), with its
    other required options filled in."""
    for name in sorted(n for n, app in get_commands().items() if app in OUR_APPS):
        command = load_command_class(get_commands()[name], name)
        yield from _walk(command.create_parser("manage.py", name), [name])


def _walk(parser, path):
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subparsers:
        for sub_name, sub in action.choices.items():
            yield from _walk(sub, [*path, sub_name])
    dests = {a.dest: a for a in parser._actions}
    if "run_id" not in dests and "run" not in dests:
        return
    rest = []
    for action in parser._actions:
        if action.dest == "run_id" or not action.required:
            continue
        if isinstance(action, argparse._SubParsersAction):
            continue
        value = action.choices[0] if action.choices else "x"
        if getattr(action.type, "__name__", "").startswith("JSON"):
            value = '"x"'  # a JSON option takes JSON text
        # Other positionals follow the run id (``runs signal RUN NAME``).
        rest += [action.option_strings[0], value] if action.option_strings else [value]
    if "run_id" in dests:
        yield path, rest
    else:
        yield [*path, "--run"], rest


def test_every_command_that_takes_a_run_id_is_walked():
    walked = {" ".join(before) for before, _ in _run_id_commands()}
    assert {"runs status", "runs resume", "runs cancel", "runs resolve", "runs budget"} <= walked
    assert "approvals list --run" in walked


@pytest.mark.django_db
@pytest.mark.parametrize("before,after", list(_run_id_commands()), ids=lambda v: " ".join(v))
def test_an_ambiguous_prefix_lists_the_candidates(runs, before, after):
    with pytest.raises(CommandError) as caught:
        call_command(*before, "54196b65", *after, stdout=StringIO())
    message = str(caught.value)
    assert "ambiguous_run" in message and "\n" not in message
    assert TWINS[0] in message and TWINS[1] in message and LONER not in message


@pytest.mark.django_db
def test_a_unique_prefix_names_the_run(runs):
    out = StringIO()
    call_command("runs", "status", LONER[:8], "--json", stdout=out)
    assert json.loads(out.getvalue())["run_id"] == LONER
    out = StringIO()
    call_command("runs", "status", TWINS[1][:13], "--json", stdout=out)
    assert json.loads(out.getvalue())["run_id"] == TWINS[1]
    out = StringIO()
    call_command("approvals", "list", "--run", LONER[:8], "--json", stdout=out)
    assert json.loads(out.getvalue()) == []


@pytest.mark.django_db
@pytest.mark.parametrize("text", ["ffffffff", "54", "not-a-run"])
def test_a_prefix_of_no_run_is_unknown(runs, text):
    with pytest.raises(CommandError, match=r"no run .*\[unknown_run\]|unknown_run"):
        call_command("runs", "status", text)


def test_the_console_search_finds_a_run_by_its_shown_prefix(clients, runs):
    alice = clients["alice"]
    page = alice.get("/runs/", {"q": LONER[:8]}).content.decode()
    assert LONER in page and TWINS[0] not in page
    page = alice.get("/runs/", {"q": "54196b65"}).content.decode()
    assert TWINS[0] in page and TWINS[1] in page and LONER not in page


@pytest.mark.django_db
@pytest.mark.parametrize("text", ["----", "-", "0", "a0b", "a0-b"])
def test_a_prefix_needs_four_hex_digits_and_says_so(runs, text):
    with pytest.raises(CommandError) as caught:
        call_command("runs", "status", "--", text)
    message = str(caught.value)
    assert "[unknown_run]" in message and "at least 4 hex digits" in message, message
    assert "ambiguous_run" not in message


@pytest.mark.django_db
def test_hyphens_alone_never_select_the_only_run():
    start_run("room_temperature", thread_id="solo", input={"question": "warm?"})
    with pytest.raises(CommandError, match="unknown_run"):
        call_command("runs", "status", "--", "----")


def test_the_console_search_finds_nothing_by_hyphens_alone(clients, runs):
    page = clients["alice"].get("/runs/", {"q": "----"}).content.decode()
    assert not any(run_id in page for run_id in [*TWINS, LONER])
