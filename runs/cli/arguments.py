"""Argument types and checks shared by every management command.

argparse's ``type=int`` accepts any size and ``type=float`` accepts ``inf`` and ``nan``;
values like that reach the database (an offset beyond a 64-bit integer), ``timedelta``
or uvicorn and end in a traceback. These types bound each number at parse time, so a
bad value is a usage error (one line, exit 2) naming the option and the range.
"""

import argparse
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, time
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError
from django.utils.dateparse import parse_date, parse_datetime

from runs.engine import service as engine
from runs.engine.service import (
    ControlError,
    InvalidJson,
    check_identifier,
    field_code,
    number_problem,
    parse_json,
    text_problem,
    value_problem,
)

#: Largest count any command accepts (offsets, limits, runs, steps): far beyond any real
#: use, well inside a 64-bit database integer.
MAX_COUNT = 2**31 - 1
#: Largest row id (a 64-bit database integer).
MAX_ID = 2**63 - 1
#: Longest span in days (``prune --older-than``, ``artifacts check --grace``...): 1,000
#: years, well inside ``datetime.timedelta``.
MAX_DAYS = 365_000.0
#: Longest span in seconds (timeouts, durations).
MAX_SECONDS = MAX_DAYS * 86400


def _coded(message: str, code: str | None) -> str:
    return f"{message} [{code}]" if code else message


def integer(low: int = 0, high: int = MAX_COUNT, code: str | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number from ``low`` to ``high`` (inclusive);
    anything else raises ``argparse.ArgumentTypeError`` (a usage error, exit 2), its
    message ending ``[code]`` when the value is one the engine has a rule and a code
    for (the API answers it with that code)."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                _coded(f"{value!r} is not a whole number", code)
            ) from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(
                _coded(f"{value} is not between {low} and {high}", code)
            )
        return number

    parse.__name__ = "whole number"
    return parse


def number(low: float = 0.0, high: float = MAX_SECONDS) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number from ``low`` to ``high`` (inclusive;
    ``0.5`` and ``1e3`` are fine, ``inf`` and ``nan`` are not); anything else raises
    ``argparse.ArgumentTypeError`` (a usage error, exit 2)."""

    def parse(value: str) -> float:
        try:
            result = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
        if number_problem(result, minimum=low, maximum=high) is not None:
            raise argparse.ArgumentTypeError(f"{value} is not between {low:g} and {high:g}")
        return result

    parse.__name__ = "number"
    return parse


def iso_time(value: str) -> datetime:
    """An argparse ``type`` for an ISO 8601 time (``2026-11-30T12:00:00Z``; a date alone
    is midnight UTC; no offset means UTC), returned in UTC. A time that is not ISO, or
    falls outside the years 1..9999 once in UTC, raises ``argparse.ArgumentTypeError``."""
    try:
        parsed = parse_datetime(value) or (
            datetime.combine(day, time()) if (day := parse_date(value)) else None
        )
    except ValueError:
        parsed = None
    if parsed is None:
        raise argparse.ArgumentTypeError(f"{value!r} is not an ISO time, e.g. 2026-11-30T12:00:00Z")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"{value} is outside the years 1 to 9999") from None


#: A TCP port to listen on.
port = integer(1, 65535)


#: Options whose value is an identifier with a code of its own (``runs.engine.rules.
#: IDENTIFIERS``): the argument gate refuses a NUL in them with that code, as their type
#: refuses every other bad character.
OPTION_FIELDS = {"--thread": "thread_id", "--request-id": "request_id"}


def check_text(value: str, what: str, code: str = "invalid_input") -> str:
    """Return ``value`` when it is text that can be stored and printed; raises
    ``CommandError`` naming ``what`` and ending ``[code]`` when it holds bytes that were
    not UTF-8 (Python keeps them as lone surrogates), other lone surrogates, or NUL: the
    engine's text rule (``runs.engine.rules.text_problem``), checked on every argument
    before argparse reads any, since the engine never sees most of them (paths,
    filters)."""
    if text_problem(value) is None:
        return value
    if "\x00" in value:
        raise CommandError(f"{what} holds a NUL character [{code}]")
    try:
        shown = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        shown = value.encode("utf-8", "backslashreplace")
    raise CommandError(f"{what} is not valid UTF-8 text: {shown!r} [{code}]")


def check_argv(argv: list[str]) -> None:
    """Check every command-line argument with ``check_text``; raises ``CommandError``
    naming the first bad one by its option (``the value of --thread``) or position, with
    the option's code (``field_code`` of ``OPTION_FIELDS``; ``invalid_input`` else)."""
    for position, value in enumerate(argv[1:], start=1):
        before = argv[position - 1]
        option, given, rest = value.partition("=")
        if value.startswith("--") and given:
            what, value = f"the value of {option}", rest
        elif before.startswith("--"):
            what, option = f"the value of {before}", before
        else:
            what, option = f"argument {position}", ""
        check_text(value, what, field_code(OPTION_FIELDS.get(option, "")))


def output_file(value: str) -> str:
    """An argparse ``type`` for a file a command will write (``backup DEST``, ``bench
    --json PATH``): a non-empty path that is not a directory, in a directory that exists
    and is writable. Anything else raises ``argparse.ArgumentTypeError`` (a usage error,
    exit 2) before the command does any work, so nothing is half-written."""
    if not value.strip():
        raise argparse.ArgumentTypeError("the path must not be empty")
    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a directory; name a file in it")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"directory {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{value} is not writable")
    return value


def input_file(value: str) -> str:
    """An argparse ``type`` for a file a command will read (``restore SRC``): a
    non-empty path to a readable regular file; anything else raises
    ``argparse.ArgumentTypeError`` (a usage error, exit 2)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("the path must not be empty")
    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a directory, not a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value} does not exist")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{value} is not readable")
    return value


def identifier(kind: str) -> Callable[[str], str]:
    """An argparse ``type`` for the identifier ``kind`` (a key of
    ``runs.engine.rules.IDENTIFIERS``: ``thread_id``, ``request_id``, ``workflow``,
    ``signal``, ``schedule``, ``step``, ``checkpoint``, ``token_name``), checked by the
    rule every face applies (``check_identifier``); anything else raises
    ``argparse.ArgumentTypeError`` ending with the kind's code (``[invalid_thread]``)."""

    def parse(value: str) -> str:
        try:
            return check_identifier(value, kind)
        except ControlError as exc:
            raise argparse.ArgumentTypeError(f"{exc.message} [{exc.code}]") from None

    parse.__name__ = kind
    return parse


#: A thread id: 1..200 characters a database stores as sent.
thread_id = identifier("thread_id")


def seconds(low: int = 1, code: str | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number of seconds from ``low`` to
    ``runs.engine.durations.MAX_SECONDS`` (ten years), the bound the engine keeps;
    ``code`` as for ``integer``."""
    return integer(low, engine.MAX_SECONDS, code)


def choice(values: list[str], code: str) -> Callable[[str], str]:
    """An argparse ``type`` for one of ``values``: argparse's own ``choices`` message
    carries no code, and the API answers the same bad value with ``code``."""

    def parse(value: str) -> str:
        if value not in values:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not one of {', '.join(values)} [{code}]"
            )
        return value

    parse.__name__ = "choice"
    return parse


def required_text(value: str) -> str:
    """An argparse ``type`` for a value that must be given (``worker --queue``,
    ``serve --host``, ``approvals list --run``): blank text raises
    ``argparse.ArgumentTypeError`` instead of meaning "none" or "everything"."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def username(value: str) -> str:
    """An argparse ``type`` for a new user's name, checked as Django checks it (the user
    model's username field: its validator, ``max_length`` and not blank), returned
    normalized; anything else raises ``argparse.ArgumentTypeError`` with Django's
    message."""
    from django.contrib.auth import get_user_model
    from django.core.exceptions import ValidationError
    from django.db.models import Field

    model = get_user_model()
    value = model.normalize_username(value)
    field = model._meta.get_field(model.USERNAME_FIELD)
    try:
        # A username is a concrete field; only a relation's reverse side has no clean().
        if isinstance(field, Field):
            field.clean(value, None)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(" ".join(exc.messages)) from None
    return value


def json_value(code: str = "invalid_input") -> Callable[[str], Any]:
    """An argparse ``type`` for a JSON value an engine call stores (``--result``): any
    JSON but ``null``, which the engine could not tell from leaving the option out.
    Blank text, text that is not JSON, ``null`` or a part no database can store (a
    ``\\ud800`` escape decodes to a lone surrogate) raise ``argparse.ArgumentTypeError``
    (a usage error, exit 2; the message ends ``[code]``, or ``[invalid_json]`` for text
    that is not JSON, as the API and the console name it), so an unset shell variable
    never silently means "none"."""

    def parse(value: str) -> Any:
        if not value.strip():
            raise argparse.ArgumentTypeError("must not be empty (leave the option out instead)")
        try:
            parsed = parse_json(value)
        except InvalidJson as exc:
            raise argparse.ArgumentTypeError(f"not valid JSON: {exc} [invalid_json]") from None
        if parsed is None:
            raise argparse.ArgumentTypeError(
                f"must not be null (leave the option out instead) [{code}]"
            )
        found = value_problem(parsed)
        if found:
            path, _type_name, reason = found
            raise argparse.ArgumentTypeError(f"at {path}: {reason} [{code}]")
        return parsed

    parse.__name__ = "JSON value"
    return parse


def json_object(code: str = "invalid_input") -> Callable[[str], dict[str, Any]]:
    """An argparse ``type`` for a JSON object (``--input``, ``--budget``,
    ``--input-patch``, ``--arguments``), checked as ``json_value(code)`` checks a value;
    any other JSON (an array, a number...) raises ``argparse.ArgumentTypeError``."""
    value_of = json_value(code)

    def parse(value: str) -> dict[str, Any]:
        parsed = value_of(value)
        if not isinstance(parsed, dict):
            raise argparse.ArgumentTypeError(
                f"must be a JSON object {{...}}, not {json.dumps(parsed)[:40]} [{code}]"
            )
        return parsed

    parse.__name__ = "JSON object"
    return parse
