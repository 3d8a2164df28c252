"""``runs pause (RUN_ID | --thread T) --reason TEXT``: pause a run for a human look
(an ``operator_request`` takeover; resolve it with ``approvals resolve ID resume``).
While steps run, the pause is requested and the command says so (``pause requested,
waiting for the running steps (N running)``); the run is PAUSED once none runs."""

from runs.cli.common import add_run_arguments, control_error, resolve_run
from runs.engine.service import ControlError, pause_progress, pause_run

help = "pause a run for a human (opens an operator_request takeover)"


def add_arguments(parser):
    add_run_arguments(parser)
    # Not required by argparse: the engine refuses a missing reason as a blank one
    # (reason_required), as from the console and the API.
    parser.add_argument("--reason", default="", help="why (required; recorded on the event)")


def handle(command, options):
    try:
        run = pause_run(resolve_run(options), actor="cli", reason=options["reason"])
    except ControlError as exc:
        raise control_error(exc) from exc
    waiting = pause_progress(run)
    if waiting:
        command.stdout.write(f"run {run.pk}: {run.status} ({waiting})")
    else:
        command.stdout.write(f"run {run.pk}: {run.status} (operator_request takeover open)")
