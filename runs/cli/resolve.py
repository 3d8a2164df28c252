"""``runs resolve RUN_ID --step NAME --outcome done|not-done --evidence TEXT
[--result JSON] [--against-verify] [--as USER]``: decide an unknown outcome; the run continues."""

from runs.cli import arguments
from runs.cli.common import add_actor_argument, cli_actor, control_error, resolve_run
from runs.engine.service import OUTCOMES, ControlError, resolve_unknown

help = "decide whether an UNKNOWN step's side effect happened; the run then continues"


def add_arguments(parser):
    parser.add_argument("run_id", help="the run's id or a unique prefix (runs list shows them)")
    parser.add_argument(
        "--step", required=True, type=arguments.identifier("step"), help="the UNKNOWN step's name"
    )
    parser.add_argument(
        "--outcome",
        required=True,
        choices=OUTCOMES,
        help="done: use --result, do not call again; not-done: call once more",
    )
    parser.add_argument("--evidence", required=True, help="what you checked, for the audit log")
    parser.add_argument(
        "--result",
        default=None,
        type=arguments.json_value(),
        help="with done: the call's result as JSON (what the tool returned)",
    )
    parser.add_argument(
        "--against-verify",
        action="store_true",
        help="resolve although the latest verify answer says the opposite (recorded)",
    )
    add_actor_argument(parser)


def handle(command, options):
    run = resolve_run(options)
    actor = cli_actor(options["as_user"])
    try:
        run = resolve_unknown(
            run,
            options["step"],
            outcome=options["outcome"],
            evidence=options["evidence"],
            actor=actor,
            result=options["result"],
            against_verify=options["against_verify"],
        )
    except ControlError as exc:
        raise control_error(exc) from exc
    command.stdout.write(
        f"resolved {options['step']} of run {run.pk} as {options['outcome']}; run is {run.status}"
    )
