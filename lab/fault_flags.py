"""The fault flags of ``runs start`` (``--crash-before STEP`` and the others), each
registered by name with the engine's hook registry when the lab app starts; what each
does when it fires is ``lab.injection`` (and the simulated lamp for
``--lamp-unreadable``). Each flag checks that it could fire in the workflow started,
so a typo is refused at start instead of never firing."""

import sys

from lab import injection
from runs.cli import arguments
from runs.engine import hooks
from runs.engine.service import ControlError, FaultFlag
from runs.tools import Tool


def tool_names(wf) -> list[str]:
    """The names a tool fault (``--crash-after-tool TOOL``) of workflow ``wf`` can match,
    sorted: each tool's full and short name (``lamp.set_brightness``, ``set_brightness``)
    for the tools defined in the modules of its steps, and an agent workflow's tools."""
    found = set(getattr(wf, "tools", None) or ())
    for module in {sys.modules.get(step.fn.__module__) for step in wf.steps}:
        found.update(v.name for v in vars(module or object).values() if isinstance(v, Tool))
    return sorted(found | {name.rsplit(".", 1)[-1] for name in found})


def _step_exists(wf, step: str) -> None:
    """Raises ``ControlError("unknown_step")`` naming ``wf``'s steps."""
    if not wf.has(step):
        raise ControlError(
            "unknown_step",
            f"{wf.name} has no step {step!r}; steps: " + ", ".join(s.name for s in wf.steps),
        )


def _tool_called(option: str):
    def check(wf, tool: str) -> None:
        """Raises ``ControlError("unknown_tool")`` naming the tools ``wf`` calls."""
        tools = tool_names(wf)
        if tool not in tools:
            raise ControlError(
                "unknown_tool",
                f"{option}: {wf.name} calls no tool {tool!r}; tools: {', '.join(tools) or 'none'}",
            )

    return check


def _lamp_called(wf, _value: bool) -> None:
    """Raises ``ControlError("no_lamp")`` when ``wf`` calls no tool of the lamp."""
    if not any(t.startswith("lamp.") for t in tool_names(wf)):
        raise ControlError(
            "no_lamp", f"--lamp-unreadable: {wf.name} does not call the simulated lamp"
        )


FLAGS = (
    FaultFlag(
        "crash_before",
        "fault injection: the worker reaching STEP exits 75 at once",
        metavar="STEP",
        parse=arguments.required_text,
        check=_step_exists,
    ),
    FaultFlag(
        "crash_at",
        "fault injection: the worker reaching POINT inside a step "
        f"({', '.join(injection.POINTS)}) SIGKILLs itself",
        metavar="POINT",
        choices=injection.POINTS,
    ),
    FaultFlag(
        "crash_after_tool",
        "fault injection: after the first call of TOOL (e.g. set_brightness) returns, the "
        "worker exits 75 before saving it",
        metavar="TOOL",
        parse=arguments.required_text,
        check=_tool_called("--crash-after-tool"),
    ),
    FaultFlag(
        "hang_after_tool",
        "fault injection: after the first call of TOOL returns, the worker prints "
        "'HANG after TOOL' and blocks until killed",
        metavar="TOOL",
        parse=arguments.required_text,
        check=_tool_called("--hang-after-tool"),
    ),
    FaultFlag(
        "crash_after_model",
        "fault injection: right after the run's Nth model response is recorded, the worker "
        "exits 75",
        metavar="N",
        parse=arguments.integer(1),
    ),
    FaultFlag(
        "lamp_unreadable",
        "fault injection: the simulated lamp stops answering reads after it is set (verify "
        "cannot tell)",
        check=_lamp_called,
    ),
)


def register() -> None:
    """Register ``FLAGS`` with the engine's hook registry. Raises ``ValueError`` when
    one of their names is registered already."""
    for flag in FLAGS:
        hooks.register_fault(flag)
