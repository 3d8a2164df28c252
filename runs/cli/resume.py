"""``runs resume (RUN_ID | --thread T) [--wait SECONDS]``: re-dispatch the next step.

``runs resume RUN_ID --from CHECKPOINT [--input-patch JSON] [--dry-run] --reason TEXT
[--json]``: resume from a named checkpoint in a new generation (``runs.engine.control.rewind``;
the reason is recorded in the audit log, so a resume without one is refused);
``--dry-run`` prints the steps that would run again, each side effect whose recorded
result is reused (with that result) and those that could repeat, and changes nothing.
``--reexecute`` makes the recorded side effects again instead.
"""

import json

from runs.cli import arguments
from runs.cli.common import add_checkpoint_argument, add_run_arguments, control_error, resolve_run
from runs.cli.previews import write_side_effects
from runs.engine.service import (
    ControlError,
    pause_progress,
    plan_resume,
    redispatch,
    resume_from_checkpoint,
)

help = "re-dispatch the run's next step, or resume from a checkpoint with --from"


def add_arguments(parser):
    add_run_arguments(parser)
    parser.add_argument(
        "--wait",
        type=arguments.number(),
        default=None,
        help="seconds to wait for a live lease (default: lease length + 5)",
    )
    add_checkpoint_argument(parser, "resume from this checkpoint (see `runs checkpoints RUN_ID`)")
    parser.add_argument(
        "--input-patch",
        default=None,
        type=arguments.json_object(),
        help="JSON object merged into the checkpoint's input (with --from)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --from: show what would run again, change nothing",
    )
    parser.add_argument(
        "--reexecute",
        action="store_true",
        help="with --from: make the recorded side effects again instead of reusing them",
    )
    parser.add_argument(
        "--reason",
        default="",
        help="why (required with --from unless --dry-run; recorded in the audit log)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def handle(command, options):
    run = resolve_run(options)
    if options["checkpoint"]:
        _resume_from(command, run, options)
        return
    if options["input_patch"] is not None or options["dry_run"] or options["reexecute"]:
        raise control_error(
            ControlError(
                "needs_checkpoint",
                "--input-patch, --dry-run and --reexecute need --from CHECKPOINT",
            )
        )
    told: list[bool] = []

    def on_wait(step, left):
        if not told:
            command.stdout.write(
                f"step {step.name} is leased by {step.owner} for {left:.1f}s; "
                "waiting for the lease to expire"
            )
            told.append(True)

    try:
        step = redispatch(run, actor="cli", wait_seconds=options["wait"], on_wait=on_wait)
    except ControlError as exc:
        raise control_error(exc) from exc
    command.stdout.write(
        f"resumed run {run.pk}: next step {step.name} (attempt so far {step.attempt}) dispatched"
    )


def _resume_from(command, run, options):
    patch = options["input_patch"]
    try:
        plan = plan_resume(run, options["checkpoint"], patch, reexecute=options["reexecute"])
        if not options["dry_run"]:
            run = resume_from_checkpoint(
                run,
                options["checkpoint"],
                actor="cli",
                input_patch=patch,
                reason=options["reason"],
                reexecute=options["reexecute"],
            )
    except ControlError as exc:
        raise control_error(exc) from exc
    if options["json"]:
        doc = {"dry_run": options["dry_run"], **plan.as_dict()}
        if not options["dry_run"]:
            doc.update(status=run.status, generation=run.generation)
        command.stdout.write(json.dumps(doc, default=str))
        return
    out = command.stdout
    verb = "would run again" if options["dry_run"] else "will run again"
    out.write(
        f"{'dry run: ' if options['dry_run'] else ''}resume run {run.pk} from "
        f"{plan.checkpoint.name} (generation {plan.checkpoint.generation})"
    )
    out.write(f"steps that {verb}: {', '.join(plan.steps_to_rerun)}")
    out.write(
        "steps superseded: " + (", ".join(s["label"] for s in plan.steps_to_supersede) or "none")
    )
    write_side_effects(out, plan.operations_reused, plan.operations_may_repeat)
    if not options["dry_run"]:
        out.write(f"run is {run.status}, generation {run.generation}")
        waiting = pause_progress(run)
        if waiting:
            # Steps ran: the resume is made once they stopped (lifecycle.settle_pause).
            out.write(f"resume requested: {waiting}")
