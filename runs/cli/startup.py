"""What ``manage.py`` checks before a command runs, how a usage error or an unreachable
database server ends it, and how it ends when stdout's reader goes away. Each failure is
one line on stderr and a non-zero exit, instead of a usage block or a traceback from
deep inside the command."""

import os
import signal
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.db import connections


def database_problem() -> str | None:
    """Why the SQLite database cannot be opened (its directory is missing, or it or its
    directory is not writable), or ``None``. PostgreSQL is judged by its server when a
    command connects; an in-memory SQLite database always opens."""
    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("sqlite3"):
        return None
    name = str(db["NAME"])
    if name == ":memory:" or name.startswith("file:"):
        return None
    path = Path(name)
    folder = path.parent
    if not folder.is_dir():
        return f"cannot open the SQLite database {path}: directory {folder} does not exist"
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            return f"cannot open the SQLite database {path}: not readable and writable"
    elif not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot create the SQLite database {path}: directory {folder} is not writable"
    return None


def stdout_closed() -> None:
    """End the process after a write to stdout found its reader gone (``| head``):
    quietly, with the status of a process killed by SIGPIPE, as other Unix tools end.
    Later flushes go to /dev/null so Python does not complain at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    # Python ignores SIGPIPE so that sockets raise instead; restore the default only now,
    # at the very end, to die of it.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)


def _one_line_error(parser: CommandParser, message: str) -> None:
    """``CommandParser.error`` for a command run from the command line: the one line
    ``manage.py CMD: error: MESSAGE (see manage.py CMD --help)`` and exit status 2,
    instead of argparse's usage block before it; called from code, ``CommandError``
    as Django raises it."""
    if not parser.called_from_command_line:
        raise CommandError(f"Error: {message}")
    parser.exit(2, f"{parser.prog}: error: {message} (see {parser.prog} --help)\n")


class SubcommandParser(CommandParser):
    """A subcommand's parser (``runs budget``, ``approvals decide``...): an argument it
    does not know is its own usage error, naming it (``manage.py runs budget: error:
    unrecognized arguments: ... (see manage.py runs budget --help)``). argparse hands a
    subcommand's leftovers up to the command's parser, whose error named the command
    and its help instead, where the subcommand's options are not listed."""

    def parse_known_args(self, args=None, namespace=None):
        """``argparse``'s, ending in ``error`` when an argument is left over; only a
        command's parser (the subcommand's caller) takes leftovers to its ``error``."""
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error("unrecognized arguments: " + " ".join(extras))
        return namespace, extras


#: Django's ``add_subparsers`` (it passes on ``called_from_command_line``).
_add_subparsers = CommandParser.add_subparsers


def _subcommands_own_their_errors(parser: CommandParser, **kwargs):
    """``CommandParser.add_subparsers`` whose subcommand parsers are
    ``SubcommandParser`` unless a command asks for another class."""
    kwargs.setdefault("parser_class", SubcommandParser)
    return _add_subparsers(parser, **kwargs)


def usage_error_line(argv: list[str], message: str) -> str:
    """The usage error line for ``message`` about the command line ``argv`` (as
    ``sys.argv``) found before any parser ran: ``manage.py CMD: error: MESSAGE (see
    manage.py CMD --help)``, the form of every other usage error (``_one_line_error``)."""
    prog = " ".join(["manage.py", *argv[1:2]])
    return f"{prog}: error: {message} (see {prog} --help)\n"


#: What argparse's own check takes for an option; ``_parse_optional`` is its hook.
_parse_optional = CommandParser._parse_optional


def _hyphens_are_a_value(parser: CommandParser, arg: str):
    """``CommandParser._parse_optional`` that takes an argument of three or more
    hyphens alone (``----``) as a value, not an unknown option: a run id prefix made of
    hyphens then reaches the engine, which names nothing by it (``[unknown_run]``)."""
    if len(arg) > 2 and not arg.strip("-"):
        return None
    return _parse_optional(parser, arg)


def one_line_usage_errors() -> None:
    """Make every management command's usage error one line (see ``_one_line_error``),
    a subcommand's name the subcommand (``SubcommandParser``), and let hyphens alone be
    a value (``_hyphens_are_a_value``). Django builds each command's parser itself from
    ``CommandParser``, so this is the one place that reaches all of them and their
    subcommands."""
    # Patching a method (method-assign); the stub also gives ``error`` a doubled ``self``.
    CommandParser.error = _one_line_error  # type: ignore[method-assign,assignment]
    CommandParser._parse_optional = _hyphens_are_a_value  # type: ignore[method-assign,assignment]
    CommandParser.add_subparsers = _subcommands_own_their_errors  # type: ignore[method-assign,assignment]


def unreachable_database(exc: Exception) -> str | None:
    """The one line to print when ``exc`` (a ``django.db.OperationalError``) is a
    failure to connect to the database server: naming DATABASE_URL, the server (host
    and port) and the driver's first line of reason. ``None`` when a connection was
    open, so the error came from a query and is not about reaching the server."""
    db = connections["default"]
    if db.connection is not None:
        return None
    if db.vendor == "sqlite":
        server = f"the SQLite database {db.settings_dict['NAME']}"
    else:
        host = db.settings_dict.get("HOST") or "localhost"
        port = db.settings_dict.get("PORT") or "default port"
        server = f"the {db.display_name} server at {host}:{port}"
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"database error: DATABASE_URL: cannot connect to {server}: {reason}"
