"""``runs start WORKFLOW --thread T --input JSON [--budget JSON] [FAULT FLAGS]``: the
fault flags are those registered with the engine (``fault_flags``; the lab's
``--crash-before STEP``, ``--crash-after-tool TOOL`` and the others)."""

from runs.cli import arguments
from runs.cli.common import control_error
from runs.engine.service import ControlError, fault_flags, start_run
from runs.workflows import registry

help = "start a run and print its id"


def add_arguments(parser):
    parser.add_argument(
        "workflow", help="a registered workflow name (python manage.py workflows lists them)"
    )
    parser.add_argument(
        "--thread",
        required=True,
        type=arguments.thread_id,
        help="thread id: the conversation this run belongs to (created on first use)",
    )
    parser.add_argument(
        "--input", default="{}", type=arguments.json_object(), help="run input as a JSON object"
    )
    parser.add_argument(
        "--budget",
        default=None,
        type=arguments.json_object("invalid_budget"),
        help='limits as a JSON object, e.g. {"tool_calls": 5, "cost_usd": "0.10"}',
    )
    # The fault flags the installed apps registered (the lab's; none without it).
    for flag in fault_flags():
        option = "--" + flag.name.replace("_", "-")
        if flag.metavar is None:
            parser.add_argument(option, action="store_true", help=flag.help)
        else:
            parser.add_argument(
                option,
                metavar=flag.metavar,
                default=None,
                type=flag.parse or str,
                choices=flag.choices,
                help=flag.help,
            )


def run_faults(wf, options) -> dict:
    """The run's ``faults`` from the fault flags given: ``{name: value}``. Raises
    ``ControlError`` for a fault that could never fire in ``wf`` (each flag's check,
    e.g. ``unknown_step`` naming the steps)."""
    faults = {}
    for flag in fault_flags():
        value = options.get(flag.name)
        if value is None or value is False:
            continue
        if flag.check is not None:
            flag.check(wf, value)
        faults[flag.name] = value
    return faults


def handle(command, options):
    try:
        wf = registry.get(options["workflow"])
    except registry.UnknownWorkflow as exc:
        raise control_error(ControlError("unknown_workflow", str(exc))) from exc
    try:
        faults = run_faults(wf, options)
        run = start_run(
            options["workflow"],
            thread_id=options["thread"],
            input=options["input"],
            budget=options["budget"],
            faults=faults,
        )
    except ControlError as exc:
        raise control_error(exc) from exc
    command.stdout.write(str(run.pk))
