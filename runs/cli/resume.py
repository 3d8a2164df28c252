"""``runs resume (RUN_ID | --thread T) [--wait SECONDS]``: re-dispatch the next step."""

import math

from django.core.management.base import CommandError

from runs.cli.common import control_error, resolve_run
from runs.engine.control import ControlError, resume

help = "re-dispatch the run's next step (waits for a live lease to expire)"


def add_arguments(parser):
    parser.add_argument("run_id", nargs="?")
    parser.add_argument("--thread")
    parser.add_argument("--wait", type=float, default=None,
                        help="seconds to wait for a live lease (default: lease length + 5)")


def handle(command, options):
    wait = options["wait"]
    if wait is not None and not (math.isfinite(wait) and wait >= 0):
        raise CommandError("--wait must be a finite number of seconds >= 0")
    run = resolve_run(options)
    told = []

    def on_wait(step, left):
        if not told:
            command.stdout.write(f"step {step.name} is leased by {step.owner} for {left:.1f}s; "
                                 "waiting for the lease to expire")
            told.append(True)

    try:
        step = resume(run, actor="cli", wait_seconds=options["wait"], on_wait=on_wait)
    except ControlError as exc:
        raise control_error(exc) from exc
    command.stdout.write(f"resumed run {run.pk}: next step {step.name} "
                         f"(attempt so far {step.attempt}) dispatched")
