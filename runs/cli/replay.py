"""``runs replay RUN [--from CHECKPOINT] [--reexecute] [--again] [--dry-run] --reason TEXT``:
replay one finished run as a new run in its thread (``runs.engine.control.replay``).

``runs replay --status FAILED [--workflow W] [--error-code C] [--since T]
--from-failed-step [--rate N] [--again] [--reexecute] [--dry-run] --reason TEXT``:
replay every matching run not replayed already, at most N starting per second (the
command creates each replay at its time, so it takes about count / N seconds).

``--dry-run`` lists the steps that will run again, each side effect whose recorded
result is reused and each one that may repeat, and changes nothing.
"""

import json
import time

from django.core.management.base import CommandError

from runs.cli import arguments
from runs.cli.common import (
    add_actor_argument,
    add_checkpoint_argument,
    cli_actor,
    control_error,
    resolve_run,
)
from runs.cli.previews import write_side_effects
from runs.engine.service import (
    DEFAULT_RATE,
    ControlError,
    ReplayPlan,
    bulk_candidates,
    bulk_replay,
    plan_replay,
    replay_run,
)

help = "replay a finished run (or every matching one) as a new run from a checkpoint"


def add_arguments(parser):
    parser.add_argument("run_id", nargs="?", help="the run to replay (omit for a bulk replay)")
    add_checkpoint_argument(
        parser, "start from this checkpoint (default: the last one before the failed step)"
    )
    parser.add_argument(
        "--status",
        default=None,
        type=arguments.required_text,
        help="bulk: runs in this state (FAILED, ...)",
    )
    parser.add_argument(
        "--workflow",
        default=None,
        type=arguments.identifier("workflow"),
        help="bulk: of this workflow",
    )
    parser.add_argument(
        "--error-code",
        default=None,
        type=arguments.required_text,
        help="bulk: whose step failed with it",
    )
    parser.add_argument(
        "--since",
        type=arguments.iso_time,
        default=None,
        help="bulk: created at or after this ISO time (e.g. 2026-11-30T12:00:00Z; UTC if "
        "no offset)",
    )
    parser.add_argument(
        "--from-failed-step",
        action="store_true",
        help="bulk: start each from the last checkpoint before its failed step",
    )
    parser.add_argument(
        "--rate",
        type=arguments.number(0.001, 1000),
        default=DEFAULT_RATE,
        help=f"bulk: replays started per second (default {DEFAULT_RATE:g})",
    )
    parser.add_argument("--again", action="store_true", help="replay runs replayed before too")
    parser.add_argument(
        "--reexecute",
        action="store_true",
        help="make the recorded side effects again instead of reusing their results",
    )
    parser.add_argument("--dry-run", action="store_true", help="show what would happen only")
    parser.add_argument("--reason", default="", help="why (required; recorded in the audit log)")
    add_actor_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def handle(command, options):
    actor = cli_actor(options["as_user"])
    if options["run_id"]:
        bulk_only = ("status", "workflow", "error_code", "since", "from_failed_step")
        given = [f"--{k.replace('_', '-')}" for k in bulk_only if options[k]]
        if given:
            raise CommandError(f"{', '.join(given)} select runs for a bulk replay; omit RUN")
        _one(command, options, actor)
    elif options["status"]:
        _bulk(command, options, actor)
    else:
        raise CommandError("name a run (RUN) or select runs for a bulk replay (--status ...)")


def _one(command, options, actor):
    run = resolve_run(options)
    try:
        plan = plan_replay(run, options["checkpoint"], reexecute=options["reexecute"])
        new = None
        if not options["dry_run"]:
            new = replay_run(
                run,
                actor=actor,
                reason=options["reason"],
                checkpoint=options["checkpoint"],
                reexecute=options["reexecute"],
                again=options["again"],
            )
    except ControlError as exc:
        raise control_error(exc) from exc
    if options["json"]:
        doc = {"dry_run": options["dry_run"], **plan.as_dict()}
        if new is not None:
            doc["replay"] = {"id": str(new.pk), "status": new.status}
        command.stdout.write(json.dumps(doc, default=str))
        return
    _write_plan(command.stdout, plan, options["dry_run"])
    if new is not None:
        command.stdout.write(f"replayed as {new.pk} ({new.status})")


def _write_plan(out, plan: ReplayPlan, dry_run: bool) -> None:
    out.write(
        f"{'dry run: ' if dry_run else ''}replay run {plan.original.pk} ({plan.original.status}) "
        f"from {plan.checkpoint.name}"
    )
    verb = "would run again" if dry_run else "will run again"
    out.write(f"steps that {verb}: {', '.join(plan.steps_to_run)}")
    write_side_effects(out, plan.operations_reused, plan.operations_may_repeat)
    if plan.replays:
        out.write(f"already replayed as: {', '.join(plan.replays)}")


def _bulk(command, options, actor):
    if options["checkpoint"]:
        raise CommandError("a bulk replay starts each run before its failed step; omit --from")
    if not options["from_failed_step"]:
        raise CommandError("a bulk replay needs --from-failed-step (where each run starts)")
    try:
        runs = bulk_candidates(
            status=options["status"].upper(),
            workflow=options["workflow"],
            error_code=options["error_code"],
            since=options["since"],
            again=options["again"],
        )
        result = bulk_replay(
            runs,
            actor=actor,
            reason=options["reason"],
            rate=options["rate"],
            reexecute=options["reexecute"],
            again=options["again"],
            dry_run=options["dry_run"],
            wait=time.sleep,
        )
    except ControlError as exc:
        raise control_error(exc) from exc
    if options["json"]:
        command.stdout.write(json.dumps(result.as_dict(), default=str))
        return
    out = command.stdout
    if result.dry_run:
        out.write(f"dry run: {len(result.plans)} runs would be replayed")
        for plan in result.plans:
            out.write(
                f"  {plan.original.pk} from {plan.checkpoint.name}: "
                f"{', '.join(plan.steps_to_run)}; reuses {len(plan.operations_reused)}, "
                f"may repeat {len(plan.operations_may_repeat)} side effects"
            )
    else:
        span = result.created[-1][2] if result.created else 0.0
        out.write(
            f"{len(result.created)} replays started over {span:.1f}s "
            f"(at most {result.rate:g} per second)"
        )
        for original, replay, delay in result.created:
            out.write(f"  {original} -> {replay} (at {delay:.1f}s)")
    for original, code, message in result.skipped:
        out.write(f"  skipped {original}: {message} [{code}]")
