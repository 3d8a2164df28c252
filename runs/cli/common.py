"""Helpers shared by the ``runs`` subcommands."""

import json

from django.core.management.base import CommandError

from runs.engine.control import ControlError, get_run, latest_run
from runs.models import Run


def parse_json(text: str, what: str):
    """Parse ``text`` as JSON; raises ``CommandError`` naming ``what`` if it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{what} is not valid JSON: {exc}") from exc


def resolve_run(options) -> Run:
    """The run named by a positional ``run_id`` or by ``--thread``; ``CommandError``
    when neither or no such run."""
    run_id = options.get("run_id")
    thread = options.get("thread")
    try:
        if run_id:
            return get_run(run_id)
        if thread:
            return latest_run(thread)
    except ControlError as exc:
        raise CommandError(exc.message) from exc
    raise CommandError("name a run: RUN_ID or --thread THREAD")


def control_error(exc: ControlError) -> CommandError:
    """A CLI error (non-zero exit) from an engine refusal, with its code and fields."""
    detail = "".join(f"\n  {k}: {v}" for k, v in exc.errors.items())
    return CommandError(f"{exc.message} [{exc.code}]{detail}")
