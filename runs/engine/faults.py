"""Crash points for fault drills: ``Run.faults = {"crash_at": POINT}`` makes the worker
that reaches ``POINT`` inside a step SIGKILL itself (no cleanup, no ``finally``, no
atexit). The fault is one-shot: it is consumed (with a ``fault.injected`` event) in a
committed transaction before the process dies.

Points: ``artifact_written`` (an artifact's file is in storage, its row not yet
committed), ``summary_ready`` (a summary is computed, not yet committed).
"""

import os
import signal

from runs.engine.gateway import run_transaction
from runs.models import Run, Step

POINTS = ("artifact_written", "summary_ready")


def crash_point(run: Run, step: Step, point: str) -> None:
    """SIGKILL this process here if the run's one-shot ``crash_at`` fault names ``point``; else return."""
    if (run.faults or {}).get("crash_at") != point:
        return
    with run_transaction(run.pk) as tx:
        faults = dict(tx.run.faults)
        if faults.pop("crash_at", None) != point:
            return
        Run.objects.filter(pk=run.pk).update(faults=faults)
        tx.event("fault.injected", {"fault": "crash_at", "point": point, "step": step.name,
                                    "pid": os.getpid()}, step_id=step.pk, progress=False)
    from runs.engine.executor import say

    say(f"CRASH at {point} in {step.name}: SIGKILL (no cleanup)")
    os.kill(os.getpid(), signal.SIGKILL)
