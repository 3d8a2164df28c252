"""One-shot fault injections around outside calls, for demos and drills
(``runs start --crash-after-tool TOOL`` / ``--hang-after-tool TOOL``), and crash points
inside the engine (``runs start --crash-at POINT``).

The fault fires after the outside call returned and before its result is saved: the
worst moment, where the world changed and the ledger does not know. It is consumed in
its own committed transaction first (with a ``fault.injected`` event), so the worker
that takes over does not fire it again.
"""

import os
import signal
import time

from runs.engine.execution.progress import CRASH_EXIT_CODE, say
from runs.engine.state.gateway import run_transaction
from runs.models import Run, Step
from runs.tools import Tool

#: Run ``faults`` keys that fire after a tool call, and what they do.
AFTER_TOOL_FAULTS = {"crash_after_tool": "crash", "hang_after_tool": "hang"}


def matches(target: str, tool: Tool, action: str) -> bool:
    """``target`` names the tool (``lamp.set_brightness`` or just ``set_brightness``)
    or the action."""
    return target in (tool.name, tool.name.rsplit(".", 1)[-1], action)


def take_after_tool(run: Run, step_id: int | None, tool: Tool, action: str) -> str | None:
    """Consume an after-tool fault that matches this call; returns ``"crash"``,
    ``"hang"`` or ``None``. Call before the tool, act after it."""
    wanted = [
        name
        for name in AFTER_TOOL_FAULTS
        if run.faults.get(name) and matches(run.faults[name], tool, action)
    ]
    if not wanted:
        return None
    with run_transaction(run.pk) as tx:
        faults = dict(tx.run.faults)
        for name in wanted:
            if faults.get(name) and matches(faults[name], tool, action):
                faults.pop(name)
                Run.objects.filter(pk=run.pk).update(faults=faults)
                tx.event(
                    "fault.injected",
                    {"fault": name, "tool": tool.name, "action": action, "pid": os.getpid()},
                    step_id=step_id,
                    progress=False,
                )
                run.faults = faults
                return AFTER_TOOL_FAULTS[name]
    return None


def act(kind: str | None, tool: Tool) -> None:
    """Fire a taken fault: ``crash`` exits 75 at once (no cleanup, like a killed worker);
    ``hang`` prints ``HANG after <tool>`` and blocks until the process is killed."""
    if kind == "crash":
        say(f"CRASH after {tool.name}, exit={CRASH_EXIT_CODE} (result not saved)")
        os._exit(CRASH_EXIT_CODE)
    if kind == "hang":
        say(f"HANG after {tool.name} (pid {os.getpid()}; result not saved)")
        while True:
            time.sleep(3600)


#: ``crash_at`` points: ``artifact_written`` (an artifact's file is in storage, its row
#: not yet committed), ``summary_ready`` (a summary is computed, not yet committed),
#: ``child_started`` (a step's child runs are started, its wait not yet recorded).
POINTS = ("artifact_written", "summary_ready", "child_started")


def crash_point(run: Run, step: Step, point: str) -> None:
    """SIGKILL this process here if the run's one-shot ``crash_at`` fault names
    ``point`` (consumed with a ``fault.injected`` event first); else return. No cleanup
    runs: no ``finally``, no atexit, exactly like a worker killed from outside."""
    if (run.faults or {}).get("crash_at") != point:
        return
    with run_transaction(run.pk) as tx:
        faults = dict(tx.run.faults)
        if faults.pop("crash_at", None) != point:
            return
        Run.objects.filter(pk=run.pk).update(faults=faults)
        tx.event(
            "fault.injected",
            {"fault": "crash_at", "point": point, "step": step.name, "pid": os.getpid()},
            step_id=step.pk,
            progress=False,
        )
    say(f"CRASH at {point} in {step.name}: SIGKILL (no cleanup)")
    os.kill(os.getpid(), signal.SIGKILL)


def after_model_response(run: Run, step: Step) -> None:
    """``runs start --crash-after-model N``: exit 75 at once (no cleanup) right after the
    run's Nth model response is recorded; the fault is consumed first (with a
    ``fault.injected`` event) so the worker that takes over does not fire it again."""
    wanted = (run.faults or {}).get("crash_after_model")
    if not wanted:
        return
    from runs.models import Operation

    recorded = Operation.objects.filter(
        run_id=run.pk, side_effect="model", status=Operation.Status.SUCCEEDED
    ).count()
    if recorded < int(wanted):
        return
    with run_transaction(run.pk) as tx:
        faults = dict(tx.run.faults)
        if not faults.pop("crash_after_model", None):
            return
        Run.objects.filter(pk=run.pk).update(faults=faults)
        tx.event(
            "fault.injected",
            {"fault": "crash_after_model", "responses": recorded, "pid": os.getpid()},
            step_id=step.pk,
            progress=False,
        )
    say(f"CRASH after model response {recorded}, exit={CRASH_EXIT_CODE} (response saved)")
    os._exit(CRASH_EXIT_CODE)
