"""``runs budget RUN_ID [--add-model-calls N] [--add-tool-calls N] [--add-tokens N]
[--add-cost USD]
[--reason TEXT] [--as USER]``: raise a run's budget; a run paused for an exhausted
budget resumes. Adding to a limit the run does not have is refused (it is unlimited
already; nothing is changed). Prints the limits before and after as JSON."""

import json

from django.core.management.base import CommandError

from runs.cli import arguments
from runs.cli.common import cli_actor, control_error, resolve_run
from runs.engine.control.lifecycle import ControlError
from runs.engine.effects.budget import parse_additions, raise_budget

help = "raise a run's budget limits (and resume it if it was paused for its budget)"


def add_arguments(parser):
    parser.add_argument("run_id", help="the run's id (runs list shows them)")
    parser.add_argument(
        "--add-model-calls",
        type=arguments.integer(),
        default=0,
        metavar="N",
        help="raise the model-call limit by N",
    )
    parser.add_argument(
        "--add-tool-calls",
        type=arguments.integer(),
        default=0,
        metavar="N",
        help="raise the tool-call limit by N",
    )
    parser.add_argument(
        "--add-tokens",
        type=arguments.integer(),
        default=0,
        metavar="N",
        help="raise the token limit by N",
    )
    parser.add_argument(
        "--add-cost",
        default="0",
        metavar="USD",
        help="raise the cost limit by this many US dollars, e.g. 0.05",
    )
    parser.add_argument("--reason", default="", help="why, for the audit log")
    parser.add_argument(
        "--as",
        dest="as_user",
        default=None,
        help="record the change as user:USER (default actor: cli)",
    )


#: Budget key -> the option that raises it.
FLAGS = {
    "model_calls": "--add-model-calls",
    "tool_calls": "--add-tool-calls",
    "tokens": "--add-tokens",
    "cost_usd": "--add-cost",
}


def handle(command, options):
    run = resolve_run(options)
    actor = cli_actor(options["as_user"])
    before = dict(run.budget or {})
    try:
        added = parse_additions(
            add_model_calls=options["add_model_calls"],
            add_tool_calls=options["add_tool_calls"],
            add_tokens=options["add_tokens"],
            add_cost_usd=options["add_cost"],
        )
    except ControlError as exc:
        raise control_error(exc) from exc
    unset = [
        f"{FLAGS[key]} ({key})" for key, amount in added.items() if amount and key not in before
    ]
    if unset:
        raise CommandError(
            f"run {run.pk} has no such limit to raise: {', '.join(unset)}; it is unlimited "
            f"there already. Its limits: {json.dumps(before)} [limit_not_set]"
        )
    try:
        run = raise_budget(
            run,
            actor=actor,
            add_model_calls=options["add_model_calls"],
            add_tool_calls=options["add_tool_calls"],
            add_cost_usd=options["add_cost"],
            add_tokens=options["add_tokens"],
            reason=options["reason"],
        )
    except ControlError as exc:
        raise control_error(exc) from exc
    command.stdout.write(
        f"run {run.pk}: budget {json.dumps(before)} -> {json.dumps(run.budget)}; "
        f"run is {run.status}"
    )
