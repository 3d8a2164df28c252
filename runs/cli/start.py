"""``runs start WORKFLOW --thread T --input JSON [--budget JSON] [--crash-before STEP]
[--crash-after-tool TOOL] [--hang-after-tool TOOL] [--crash-after-model N] [--lamp-unreadable]
[--crash-at POINT]``."""

from runs.cli import arguments
from runs.cli.common import control_error, parse_json
from runs.engine.control.lifecycle import ControlError, start_run
from runs.engine.execution import faults as fault_points
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
    parser.add_argument("--input", default="{}", help="run input as a JSON object")
    parser.add_argument(
        "--budget", default=None, help='limits as JSON, e.g. {"tool_calls": 5, "cost_usd": "0.10"}'
    )
    parser.add_argument(
        "--crash-before",
        metavar="STEP",
        default=None,
        help="fault injection: the worker reaching STEP exits 75 at once",
    )
    parser.add_argument(
        "--crash-at",
        metavar="POINT",
        default=None,
        choices=fault_points.POINTS,
        help="fault injection: the worker reaching POINT inside a step "
        "(artifact_written, summary_ready) SIGKILLs itself",
    )
    parser.add_argument(
        "--crash-after-tool",
        metavar="TOOL",
        default=None,
        help="fault injection: after the first call of TOOL (e.g. "
        "set_brightness) returns, the worker exits 75 before saving it",
    )
    parser.add_argument(
        "--hang-after-tool",
        metavar="TOOL",
        default=None,
        help="fault injection: after the first call of TOOL returns, the "
        "worker prints 'HANG after TOOL' and blocks until killed",
    )
    parser.add_argument(
        "--crash-after-model",
        metavar="N",
        type=arguments.integer(1),
        default=None,
        help="fault injection: right after the run's Nth model response is recorded, "
        "the worker exits 75",
    )
    parser.add_argument(
        "--lamp-unreadable",
        action="store_true",
        help="fault injection: the simulated lamp stops answering reads "
        "after it is set (verify cannot tell)",
    )


def handle(command, options):
    data = parse_json(options["input"], "--input")
    budget = parse_json(options["budget"], "--budget") if options["budget"] else None
    faults = {}
    if options["crash_before"]:
        try:
            wf = registry.get(options["workflow"])
        except registry.UnknownWorkflow as exc:
            raise control_error(ControlError("unknown_workflow", str(exc))) from exc
        if not wf.has(options["crash_before"]):
            raise control_error(
                ControlError(
                    "unknown_step",
                    f"{wf.name} has no step {options['crash_before']!r}; steps: "
                    + ", ".join(s.name for s in wf.steps),
                )
            )
        faults["crash_before"] = options["crash_before"]
    if options["crash_at"]:
        faults["crash_at"] = options["crash_at"]
    for name in ("crash_after_tool", "hang_after_tool"):
        if options[name]:
            faults[name] = options[name]
    if options["lamp_unreadable"]:
        faults["lamp_unreadable"] = True
    if options["crash_after_model"]:
        faults["crash_after_model"] = options["crash_after_model"]
    try:
        run = start_run(
            options["workflow"],
            thread_id=options["thread"],
            input=data,
            budget=budget,
            faults=faults,
        )
    except ControlError as exc:
        raise control_error(exc) from exc
    command.stdout.write(str(run.pk))
