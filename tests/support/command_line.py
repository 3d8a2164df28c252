"""The project's management commands as tests see them: every command of ours, every
argument of each (subcommands included), and the ``manage_in_process`` fixture that runs
``manage.py`` through its own ``main()`` inside the test process.

The fixture is registered for every test module by conftest.py's ``pytest_plugins``.
"""

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any

import django
import pytest
from django.core.management import get_commands, load_command_class
from django.core.management.base import CommandParser
from django.db import connections

OUR_APPS = {"runs", "approvals", "apitokens"}
#: Options every Django command has; Django documents them.
DJANGO_OPTIONS = {
    "help",
    "version",
    "verbosity",
    "settings",
    "pythonpath",
    "traceback",
    "no_color",
    "force_color",
    "skip_checks",
}


def parsers_of(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, Any]]:
    """``(path, parser)`` for ``parser`` and each of its subcommands' parsers, depth
    first; ``path`` grows by the subcommand's name (``"runs start"``)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers_of(sub, f"{path} {name}")


def our_commands() -> list[str]:
    """The names of the management commands of the project's own apps, sorted."""
    return sorted(name for name, app in get_commands().items() if app in OUR_APPS)


def every_action() -> Iterator[tuple[str, argparse.Action]]:
    """``(path, action)`` for every argparse action of every command of ours and of its
    subcommands (``path`` is ``"runs start"``), Django's own options left out."""
    for name in our_commands():
        command = load_command_class(get_commands()[name], name)
        for path, parser in parsers_of(command.create_parser("manage.py", name), name):
            for action in parser._actions:
                if action.dest not in DJANGO_OPTIONS:
                    yield path, action


@pytest.fixture
def manage_in_process(capsys, monkeypatch) -> Callable[..., tuple[object, str, str]]:
    """``run(*args)`` runs ``manage.py *args`` through the script's own ``main()`` (its
    start-up checks, its one-line usage errors, Django's command line) inside this test
    process, and returns ``(exit status, stdout, stderr)``. A long table of refusals
    costs a Python process and Django start-up per row otherwise; the tests that use it
    still run a few of the rows as real processes."""
    import manage

    # Django is set up in this process already; a second setup would reconfigure logging.
    monkeypatch.setattr(django, "setup", lambda: None)
    # main() makes usage errors one line for the whole process: put Django's back after.
    monkeypatch.setattr(CommandParser, "error", CommandParser.error)
    monkeypatch.setattr(CommandParser, "_parse_optional", CommandParser._parse_optional)
    monkeypatch.setattr(CommandParser, "add_subparsers", CommandParser.add_subparsers)
    # A command run from the command line closes every connection at its end, which
    # would drop the test's database.
    monkeypatch.setattr(connections, "close_all", lambda: None)

    def run(*args: str) -> tuple[object, str, str]:
        monkeypatch.setattr(sys, "argv", ["manage.py", *args])
        try:
            manage.main()
            status: object = 0
        except SystemExit as exc:
            status = exc.code
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run
