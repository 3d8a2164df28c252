"""``runs deliver (RUN_ID | --thread T) --call TOOL_CALL_ID --result JSON [--request-id KEY]
[--as USER]``: deliver an outside system's result for a tool call an agent deferred
(``CallDeferred``); actor ``cli`` or ``user:USER``."""

from runs.cli import arguments
from runs.cli.common import (
    add_actor_argument,
    add_request_id_argument,
    add_run_arguments,
    deliver,
)
from runs.engine.service import deliver_tool_result

help = "deliver the outside result of a tool call an agent deferred (CallDeferred)"


def add_arguments(parser):
    add_run_arguments(parser)
    parser.add_argument(
        "--call",
        required=True,
        type=arguments.required_text,
        help="the deferred tool call's id (runs status shows it)",
    )
    parser.add_argument(
        "--result", required=True, type=arguments.json_value(), help="the call's result as JSON"
    )
    add_request_id_argument(parser)
    add_actor_argument(parser)


def handle(command, options):
    run, _, again = deliver(options, deliver_tool_result, options["call"], options["result"])
    command.stdout.write(
        f"run {run.pk}: result of {options['call']} delivered{again}; run is {run.status}"
    )
