"""``runs signal (RUN_ID | --thread T) NAME [--payload JSON] [--request-id KEY] [--as USER]``:
deliver a signal to a run (actor ``cli`` or ``user:USER``)."""

from runs.cli import arguments
from runs.cli.common import (
    add_actor_argument,
    add_request_id_argument,
    add_run_arguments,
    cli_actor,
    control_error,
    resolve_run,
)
from runs.engine.service import ControlError, deliver_signal

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
    run = resolve_run(options)
    actor = cli_actor(options["as_user"])
    try:
        delivery = deliver_signal(
            run.pk,
            options["name"],
            options["payload"],
            request_id=options["request_id"],
            actor=actor,
        )
    except ControlError as exc:
        raise control_error(exc) from exc
    run.refresh_from_db()
    what = "taken by the waiting step" if delivery.consumed else "kept until the run waits for it"
    again = " (delivered before with this request id)" if delivery.duplicate else ""
    command.stdout.write(
        f"run {run.pk}: signal {options['name']} {what}{again}; run is {run.status}"
    )
