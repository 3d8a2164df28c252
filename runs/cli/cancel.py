"""``runs cancel (RUN_ID | --thread T) --reason TEXT``: cancel as a flow (actor ``cli``)."""

from runs.cli.common import add_run_arguments, control_error, resolve_run
from runs.engine.service import ControlError, cancel_progress, request_cancel

help = "cancel a run (a running step stops at its next heartbeat or safe point)"


def add_arguments(parser):
    add_run_arguments(parser)
    # Not required by argparse: the engine refuses a missing reason as a blank one
    # (reason_required), as from the console and the API.
    parser.add_argument("--reason", default="", help="why (required; recorded on the event)")


def handle(command, options):
    run = resolve_run(options)
    try:
        run = request_cancel(run, actor="cli", reason=options["reason"])
    except ControlError as exc:
        raise control_error(exc) from exc
    command.stdout.write(f"run {run.pk}: {run.status} ({cancel_progress(run)})")
