"""One-shot fault injection into the engine, for demos and drills, installed at the
engine's hook points (``runs.engine.hooks``) when the lab app starts. A run's ``faults``
(set by ``runs start``) arm them:

- ``crash_before`` (``--crash-before STEP``): the worker that claims STEP exits 75 at
  once, before the step runs;
- ``crash_after_tool`` / ``hang_after_tool`` (``--crash-after-tool TOOL`` /
  ``--hang-after-tool TOOL``): after the outside call returned and before its result is
  saved, the worst moment, where the world changed and the ledger does not know;
- ``crash_at`` (``--crash-at POINT``): SIGKILL at a point inside a step
  (``hooks.INSIDE_STEP``);
- ``crash_after_model`` (``--crash-after-model N``): exit 75 right after the run's Nth
  model response is recorded;
- ``lamp_unreadable`` (``--lamp-unreadable``): read by the simulated lamp's tool
  (``armed``), which then stops answering this run's reads.

``lab.fault_flags`` offers them as ``runs start`` options.

Each fault is consumed in its own committed transaction first (with a
``fault.injected`` event), so the worker that takes over does not fire it again.
"""

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from django.db.models import F
from django.db.models.functions import Now

from runs.engine import hooks
from runs.engine.execution import dispatch
from runs.engine.execution.progress import CRASH_EXIT_CODE, say
from runs.engine.state.gateway import run_transaction
from runs.models import Operation, Run, Step
from runs.states import StepStatus
from runs.tools import Tool

#: Run ``faults`` keys that fire after a tool call, and what they do.
AFTER_TOOL_FAULTS = {"crash_after_tool": "crash", "hang_after_tool": "hang"}
#: ``crash_at`` points: the engine's hook points inside a step.
POINTS = hooks.INSIDE_STEP


def armed(run_id: str, name: str) -> Any:
    """The value of the fault ``name`` the run ``run_id`` carries (``None`` when it
    carries none), read from its row: a tool of the simulator reads its own fault
    (``lamp_unreadable``) this way, since the engine hands tools none."""
    faults = Run.objects.filter(pk=run_id).values_list("faults", flat=True).first()
    return (faults or {}).get(name)


def install() -> None:
    """Register the fault hooks at the engine's hook points (safe to call twice)."""
    hooks.register(hooks.STEP_CLAIMED, crash_before)
    hooks.register(hooks.OUTSIDE_CALL, after_tool)
    hooks.register(hooks.MODEL_RESPONSE_RECORDED, after_model_response)
    for point in POINTS:
        hooks.register(point, _crash_point(point))


def crash_before(run: Run, step: Step, attempt: int, worker_id: str) -> None:
    """``crash_before``: consume the fault and give the claimed step back uncounted
    (PENDING, as a worker that died before claiming it leaves it; its next claim has the
    next fencing token, but the given-back one does not count against max_attempts),
    record it, then die at once without any cleanup, as a killed worker would."""
    if (run.faults or {}).get("crash_before") != step.name:
        return
    with run_transaction(run.pk) as tx:
        faults = dict(tx.run.faults)
        if faults.pop("crash_before", None) != step.name:
            return
        Run.objects.filter(pk=run.pk).update(faults=faults)
        released = tx.transition_step(
            step.pk,
            StepStatus.PENDING,
            expected=StepStatus.RUNNING,
            attempt=attempt,
            actor=worker_id,
            event_type="step.released",
            payload={"attempt": attempt, "reason": "fault injected"},
            progress=False,
            owner="",
            lease_until=None,
            not_before=Now(),
            # The step never ran: the claim does not count against max_attempts.
            attempt_base=F("attempt_base") + 1,
        )
        if released:
            dispatch.notify_on_commit(run.pk, step.pk)
        tx.event(
            "fault.injected",
            {"fault": "crash_before", "step": step.name, "pid": os.getpid()},
            step_id=step.pk,
            progress=False,
        )
    say(f"CRASH before {step.name}, exit={CRASH_EXIT_CODE} (no cleanup)")
    os._exit(CRASH_EXIT_CODE)


def matches(target: str, tool: Tool, action: str) -> bool:
    """``target`` names the tool (``lamp.set_brightness`` or just ``set_brightness``)
    or the action."""
    return target in (tool.name, tool.name.rsplit(".", 1)[-1], action)


def after_tool(run: Run, step_id: int | None, tool: Tool, action: str) -> Callable[[], None] | None:
    """Consume an after-tool fault that matches this call before it is sent; returns
    what fires it once the call returned (``None`` when no fault matches)."""
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
                kind = AFTER_TOOL_FAULTS[name]
                return lambda: act(kind, tool)
    return None


def act(kind: str, tool: Tool) -> None:
    """Fire a taken fault: ``crash`` exits 75 at once (no cleanup, like a killed worker);
    ``hang`` prints ``HANG after <tool>`` and blocks until the process is killed."""
    if kind == "crash":
        say(f"CRASH after {tool.name}, exit={CRASH_EXIT_CODE} (result not saved)")
        os._exit(CRASH_EXIT_CODE)
    if kind == "hang":
        say(f"HANG after {tool.name} (pid {os.getpid()}; result not saved)")
        while True:
            time.sleep(3600)


#: One hook per point, so that installing again registers nothing new.
_POINT_HOOKS: dict[str, Callable[[Run, Step], None]] = {}


def _crash_point(point: str) -> Callable[[Run, Step], None]:
    if point not in _POINT_HOOKS:

        def hook(run: Run, step: Step) -> None:
            crash_point(run, step, point)

        _POINT_HOOKS[point] = hook
    return _POINT_HOOKS[point]


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
    """``crash_after_model``: exit 75 at once (no cleanup) right after the run's Nth
    model response is recorded; the fault is consumed first (with a ``fault.injected``
    event) so the worker that takes over does not fire it again."""
    wanted = (run.faults or {}).get("crash_after_model")
    if not wanted:
        return
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
