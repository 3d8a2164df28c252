"""Helpers shared by the ``runs`` subcommands."""

import json
from collections.abc import Callable, Iterable
from typing import Any

from django.core.management.base import CommandError

from runs.cli import arguments
from runs.cli.terminal import terminal_text
from runs.engine.service import ControlError, find_run, latest_run
from runs.models import Run


def one_line(text: str) -> str:
    """``text`` as the one line a CLI error must be: its lines stripped, blank ones
    dropped, joined with ``"; "``. An exception's text can span lines (tarfile's
    ``ReadError`` lists each compression it tried; a subprocess's stderr has many)."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


#: Characters of a step output or run result that ``runs status`` prints on its line.
SHOWN_CHARS = 120

#: Characters of a message's text that ``runs status`` prints on its line.
MESSAGE_CHARS = 500


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``value`` (untrusted JSON: agent or tool output) as one terminal-safe line: its
    JSON text through ``terminal_text`` (every character a terminal would act on written
    as its ``\\uXXXX`` escape), cut to ``limit`` characters with ``...`` and the whole
    length when longer (``--json`` prints it whole). Never raises."""
    return terminal_text(json.dumps(value, ensure_ascii=False, default=str), limit)


def write_rows(
    out,
    rows: list[dict],
    options,
    *,
    nothing: str,
    lines: Callable[[dict], Iterable[str]],
) -> None:
    """Print a listing to ``out`` (a command's ``stdout``) in the form its options ask:
    ``--ids`` (``options["ids"]``, for commands that have it): each row's ``id``, one a
    line; ``--json``: the rows as one JSON array; else the text lines ``lines(row)``
    gives for each row, or the one line ``nothing`` when there are no rows."""
    if options.get("ids"):
        out.write("\n".join(str(r["id"]) for r in rows))
        return
    if options["json"]:
        out.write(json.dumps(rows))
        return
    if not rows:
        out.write(nothing)
    for row in rows:
        for line in lines(row):
            out.write(line)


def add_run_arguments(parser) -> None:
    """Let a subcommand name its run the way ``resolve_run`` reads it: a positional
    ``RUN_ID`` or ``--thread THREAD`` (the thread's latest run)."""
    parser.add_argument(
        "run_id",
        nargs="?",
        help="the run's id or a unique prefix of it (or name it by --thread)",
    )
    parser.add_argument(
        "--thread", type=arguments.thread_id, help="act on the latest run of this thread id instead"
    )


def resolve_run(options) -> Run:
    """The run named by a positional ``run_id`` (whole or a unique prefix,
    ``run_ids.find_run``) or by ``--thread``; ``CommandError`` when no such run or the
    prefix is ambiguous (the candidates listed), or (a usage error, exit status 2) when
    neither is given."""
    run_id = options.get("run_id")
    thread = options.get("thread")
    try:
        if run_id:
            return find_run(run_id)
        if thread:
            return latest_run(thread)
    except ControlError as exc:
        raise control_error(exc) from exc
    raise CommandError("name a run: RUN_ID or --thread THREAD", returncode=2)


def control_error(exc: ControlError) -> CommandError:
    """A CLI error (non-zero exit) from an engine refusal: one line with its message,
    code and the fields' errors it does not state already (``MESSAGE [CODE]; field: why;
    ...``)."""
    detail = "".join(f"; {k}: {v}" for k, v in exc.unsaid_errors().items())
    return CommandError(one_line(f"{exc.message} [{exc.code}]{detail}"))


def cli_user(username: str, permission: str | None = None):
    """The user ``username``; raises ``CommandError`` (``unknown_user``) naming the users
    who could act instead (those holding ``permission``, or all, at most 20) and how to
    create one, or (``permission_denied``) when the user lacks ``permission``."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects
    try:
        user = users.get_by_natural_key(username)
    except get_user_model().DoesNotExist:
        candidates = users.with_perm(permission) if permission else users.filter(is_active=True)
        names = sorted(candidates.values_list("username", flat=True)[:20])
        who = f"users holding {permission}" if permission else "users"
        raise CommandError(
            f"no user {username!r} [unknown_user]; {who}: {', '.join(names) or 'none'} "
            "(create one with python manage.py createsuperuser, or python manage.py "
            "seed_demo for the demo users viewer, operator and approver)"
        ) from None
    if permission and not user.has_perm(permission):
        raise CommandError(f"{username} lacks {permission} [permission_denied]")
    return user


def add_actor_argument(parser, dest: str = "as_user") -> None:
    """Add ``--as USERNAME``: act, and be recorded, as ``user:USERNAME`` (default actor
    ``cli``). ``cli_actor`` checks that the user exists and may act."""
    parser.add_argument(
        "--as",
        dest=dest,
        default=None,
        type=arguments.required_text,
        metavar="USERNAME",
        help="act and be recorded as user:USERNAME (default actor: cli)",
    )


def add_checkpoint_argument(parser, help: str) -> None:
    """Add ``--from CHECKPOINT`` (dest ``checkpoint``, default ``None``): the checkpoint
    to resume or replay from, held to the checkpoint name rule."""
    parser.add_argument(
        "--from",
        dest="checkpoint",
        metavar="CHECKPOINT",
        type=arguments.identifier("checkpoint"),
        default=None,
        help=help,
    )


def add_request_id_argument(parser) -> None:
    """Add ``--request-id KEY``, the idempotency key of a delivery: the same key again
    delivers nothing new. A key the idempotency key rule refuses is a usage error."""
    parser.add_argument(
        "--request-id",
        default=None,
        type=arguments.identifier("request_id"),
        help="idempotency key: the same key again delivers nothing new",
    )


def deliver(options, verb: Callable[..., Any], *args: Any) -> tuple[Run, Any, str]:
    """Deliver to the run ``options`` name (``add_run_arguments``) as the ``--as`` user
    (``add_actor_argument``) with its ``--request-id``: ``verb(run id, *args,
    request_id=..., actor=...)``, a signal or a deferred tool call's result. Returns
    ``(run, delivery, again)``: the run read after the delivery, the verb's ``Delivery``
    and ``" (delivered before with this request id)"`` for a repeat, else ``""``.
    Raises ``CommandError`` for an engine refusal (``control_error``)."""
    run = resolve_run(options)
    actor = cli_actor(options["as_user"])
    try:
        delivery = verb(run.pk, *args, request_id=options["request_id"], actor=actor)
    except ControlError as exc:
        raise control_error(exc) from exc
    run.refresh_from_db()
    again = " (delivered before with this request id)" if delivery.duplicate else ""
    return run, delivery, again


def cli_actor(username: str | None, permission: str = "runs.operate_run") -> str:
    """The event actor for a CLI action: ``"cli"`` without ``--as``, else
    ``"user:<username>"`` after checking that the user exists and holds ``permission``.
    Raises ``CommandError`` (``unknown_user`` / ``permission_denied``) otherwise, so
    nothing is recorded in the name of someone who may not act."""
    if not username:
        return "cli"
    cli_user(username, permission)
    return f"user:{username}"
