"""``runs start WORKFLOW --thread T --input JSON [--budget JSON] [--crash-before STEP]
[--crash-after-tool TOOL] [--hang-after-tool TOOL] [--crash-after-model N] [--lamp-unreadable]
[--crash-at POINT]``."""

import sys

from lab import injection as fault_points
from runs.cli import arguments
from runs.cli.common import control_error
from runs.engine.service import ControlError, start_run
from runs.tools import Tool
from runs.workflows import registry

help = "start a run and print its id"


def add_arguments(parser):
    parser.add_argument(
        "workflow",
        type=arguments.identifier("workflow"),
        help="a registered workflow name (python manage.py workflows lists them)",
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
    parser.add_argument(
        "--crash-before",
        metavar="STEP",
        default=None,
        type=arguments.required_text,
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
        type=arguments.required_text,
        help="fault injection: after the first call of TOOL (e.g. "
        "set_brightness) returns, the worker exits 75 before saving it",
    )
    parser.add_argument(
        "--hang-after-tool",
        metavar="TOOL",
        default=None,
        type=arguments.required_text,
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


def tool_names(wf) -> list[str]:
    """The names a tool fault (``--crash-after-tool TOOL``) of workflow ``wf`` can match,
    sorted: each tool's full and short name (``lamp.set_brightness``, ``set_brightness``)
    for the tools defined in the modules of its steps, and an agent workflow's tools."""
    found = set(getattr(wf, "tools", None) or ())
    for module in {sys.modules.get(step.fn.__module__) for step in wf.steps}:
        found.update(v.name for v in vars(module or object).values() if isinstance(v, Tool))
    return sorted(found | {name.rsplit(".", 1)[-1] for name in found})


def _check_faults(wf, options) -> None:
    """Refuse a fault flag that could never fire in ``wf`` (``unknown_step``,
    ``unknown_tool``, ``no_lamp``), naming what it could name instead."""
    if options["crash_before"] and not wf.has(options["crash_before"]):
        raise control_error(
            ControlError(
                "unknown_step",
                f"{wf.name} has no step {options['crash_before']!r}; steps: "
                + ", ".join(s.name for s in wf.steps),
            )
        )
    tools = tool_names(wf)
    for name in fault_points.AFTER_TOOL_FAULTS:
        if options[name] and options[name] not in tools:
            raise control_error(
                ControlError(
                    "unknown_tool",
                    f"--{name.replace('_', '-')}: {wf.name} calls no tool {options[name]!r}; "
                    f"tools: {', '.join(tools) or 'none'}",
                )
            )
    if options["lamp_unreadable"] and not any(t.startswith("lamp.") for t in tools):
        raise control_error(
            ControlError(
                "no_lamp", f"--lamp-unreadable: {wf.name} does not call the simulated lamp"
            )
        )


def handle(command, options):
    try:
        wf = registry.get(options["workflow"])
    except registry.UnknownWorkflow as exc:
        raise control_error(ControlError("unknown_workflow", str(exc))) from exc
    _check_faults(wf, options)
    faults = {}
    if options["crash_before"]:
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
            input=options["input"],
            budget=options["budget"],
            faults=faults,
        )
    except ControlError as exc:
        raise control_error(exc) from exc
    command.stdout.write(str(run.pk))
