"""Faults the simulated outside world injects into its callers, for drills and the soak.

A fault is armed for one device operation (``"thermostat.read"``, ``"payments.charge"``)
in ``<AGENTOPS_DEVICE_DIR>/faults.json``, shared by all processes under a file lock, and
fires inside the worker process that makes the call:

- ``stop``: the calling process suspends itself with SIGSTOP, at that exact point of the
  calling thread (the drill then SIGKILLs it, or SIGCONTs it later), as if the machine
  froze at that instant;
- ``stop_then_fail``: the same, and after SIGCONT the call raises ``DeviceFault``;
- ``fail``: the call raises ``DeviceFault``;
- ``delay``: the call sleeps ``seconds`` first (a slow outside system).

``when`` is ``"before"`` (the outside system has not acted yet) or ``"after"`` (it acted
and logged the call; the caller has not seen the answer). ``shots`` is how many calls it
fires on (``-1``: every call); ``run_id`` limits it to one run's calls.
"""

import fcntl
import json
import os
import signal
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings


class DeviceFault(Exception):
    """An injected failure of a simulated outside system."""


def _path() -> Path:
    return Path(settings.AGENTOPS_DEVICE_DIR) / "faults.json"


@contextmanager
def _locked():
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                data = {}
            yield data
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def arm(
    op: str,
    action: str,
    *,
    when: str = "after",
    run_id: str | uuid.UUID | None = None,
    shots: int = 1,
    seconds: float = 0.0,
) -> None:
    """Arm a fault on device operation ``op`` (see the module docstring)."""
    if action not in ("stop", "stop_then_fail", "fail", "delay"):
        raise ValueError(f"unknown fault action {action!r}")
    with _locked() as data:
        data.setdefault(op, []).append(
            {
                "action": action,
                "when": when,
                "shots": shots,
                "run_id": str(run_id) if run_id else None,
                "seconds": seconds,
            }
        )


def clear() -> None:
    """Disarm every fault."""
    with _locked() as data:
        data.clear()


def armed() -> dict:
    """The armed faults: ``{op: [{"action", "when", "shots", "run_id", "seconds"}]}``."""
    if not _path().exists():
        return {}
    with _locked() as data:
        return {op: list(items) for op, items in data.items() if items}


def fire(op: str, when: str, run_id: str) -> None:
    """Called by a device around its operation; applies the first matching armed fault.
    Cheap when no fault file exists (the normal case)."""
    if not _path().exists():
        return
    with _locked() as data:
        fault = None
        for candidate in data.get(op, []):
            if candidate["when"] == when and candidate["run_id"] in (None, str(run_id)):
                fault = dict(candidate)
                if candidate["shots"] > 0:
                    candidate["shots"] -= 1
                break
        data[op] = [f for f in data.get(op, []) if f["shots"] != 0]
    if fault is None:
        return
    if fault["action"] == "delay":
        time.sleep(fault["seconds"])
        return
    if fault["action"] in ("stop", "stop_then_fail"):
        # Sent to this thread, not the process: a SIGSTOP sent to the process reaches
        # its main thread first, and in a worker with slot threads the calling thread
        # ran on (into the outside system's lock) until the stop caught up with it.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    if fault["action"] in ("fail", "stop_then_fail"):
        raise DeviceFault(f"{op}: injected failure")
