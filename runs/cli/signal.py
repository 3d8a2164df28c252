"""``runs signal (RUN_ID | --thread T) NAME [--payload JSON] [--request-id KEY] [--as USER]``:
deliver a signal to a run (actor ``cli`` or ``user:USER``)."""

from runs.cli import arguments
from runs.cli.common import (
    add_actor_argument,
    add_request_id_argument,
    add_run_arguments,
    deliver,
)
from runs.engine.service import deliver_signal

help = "deliver a named signal (with a JSON payload) to a run that waits for it"


def add_arguments(parser):
    add_run_arguments(parser)
    parser.add_argument("name", type=arguments.identifier("signal"), help="the signal's name")
    parser.add_argument(
        "--payload",
        default=None,
        type=arguments.json_value(),
        help="the payload as JSON (default {}), checked against the waiting step's schema",
    )
    add_request_id_argument(parser)
    add_actor_argument(parser)


def handle(command, options):
    run, delivery, again = deliver(options, deliver_signal, options["name"], options["payload"])
    what = "taken by the waiting step" if delivery.consumed else "kept until the run waits for it"
    command.stdout.write(
        f"run {run.pk}: signal {options['name']} {what}{again}; run is {run.status}"
    )
