"""``runs budget RUN_ID [--add-model-calls N] [--add-tool-calls N] [--add-tokens N]
[--add-cost-usd USD] --reason TEXT [--as USER]``: raise a run's budget; a run paused
for an exhausted budget resumes. Each flag is the API's field (``add_cost_usd``), with
``--add-cost`` kept as the older name of ``--add-cost-usd``. Adding to a limit the run
does not have is refused (it is unlimited already; nothing is changed). Prints the
limits before and after as JSON."""

import json

from runs.cli.common import add_actor_argument, cli_actor, control_error, resolve_run
from runs.engine.service import ControlError, amount_from_text, raise_budget

help = "raise a run's budget limits (and resume it if it was paused for its budget)"


def add_arguments(parser):
    # The amounts go to the engine as the numbers they spell (amount_from_text): it
    # checks them (whole counts, USD, bounds) and refuses a bad one with invalid_budget,
    # as from the console and the API.
    parser.add_argument("run_id", help="the run's id or a unique prefix (runs list shows them)")
    parser.add_argument(
        "--add-model-calls",
        default="0",
        metavar="N",
        help="raise the model-call limit by N",
    )
    parser.add_argument(
        "--add-tool-calls",
        default="0",
        metavar="N",
        help="raise the tool-call limit by N",
    )
    parser.add_argument(
        "--add-tokens",
        default="0",
        metavar="N",
        help="raise the token limit by N",
    )
    parser.add_argument(
        "--add-cost-usd",
        "--add-cost",
        dest="add_cost_usd",
        default="0",
        metavar="USD",
        help="raise the cost limit by this many US dollars, e.g. 0.05",
    )
    parser.add_argument("--reason", default="", help="why (required; recorded in the audit log)")
    add_actor_argument(parser)


#: The engine's name of an addition -> the option that gives it.
FLAGS = {
    "add_model_calls": "--add-model-calls",
    "add_tool_calls": "--add-tool-calls",
    "add_tokens": "--add-tokens",
    "add_cost_usd": "--add-cost-usd",
}


def _named_by_flags(exc: ControlError) -> ControlError:
    """``exc`` speaking of this command's options rather than the engine's keywords."""
    message = exc.message
    for name, flag in FLAGS.items():
        message = message.replace(name, flag)
    errors = {FLAGS.get(k, k): v for k, v in exc.errors.items()}
    return ControlError(exc.code, message, errors)


def handle(command, options):
    run = resolve_run(options)
    actor = cli_actor(options["as_user"])
    before = dict(run.budget or {})
    try:
        run = raise_budget(
            run,
            actor=actor,
            add_model_calls=amount_from_text("model_calls", options["add_model_calls"]),
            add_tool_calls=amount_from_text("tool_calls", options["add_tool_calls"]),
            add_cost_usd=amount_from_text("cost_usd", options["add_cost_usd"]),
            add_tokens=amount_from_text("tokens", options["add_tokens"]),
            reason=options["reason"],
        )
    except ControlError as exc:
        raise control_error(_named_by_flags(exc)) from exc
    command.stdout.write(
        f"run {run.pk}: budget {json.dumps(before)} -> {json.dumps(run.budget)}; "
        f"run is {run.status}"
    )
