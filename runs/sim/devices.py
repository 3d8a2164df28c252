"""Simulated outside world: devices with their own state and call logs.

These stand for systems AgentOps does not own (a thermostat, a lamp, a publisher). Each
keeps its state and a log of every call in its own JSON file under
``settings.AGENTOPS_DEVICE_DIR``, shared by all processes through an exclusive file lock,
so tests can count how often the outside world was really touched.
"""

import fcntl
import json
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings

from runs.sim import faults


class DeviceStore:
    """One device's file: ``{"state": {...}, "calls": [{"op", "run_id", "key", "args"}]}``."""

    def __init__(self, name: str, initial_state: dict[str, Any] | None = None):
        self.name = name
        self.initial_state = dict(initial_state or {})

    @property
    def path(self) -> Path:
        return Path(settings.AGENTOPS_DEVICE_DIR) / f"{self.name}.json"

    @contextmanager
    def locked(self) -> Iterator[dict[str, Any]]:
        """Yield the device's data under an exclusive lock; changes are written back
        atomically (temp file + rename) when the block exits without an error."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_suffix(".lock")
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data = self._read()
                yield data
                tmp = self.path.with_suffix(".tmp")
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump(data, fh)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def snapshot(self) -> dict[str, Any]:
        """The device's data as last written (read without taking the lock)."""
        return self._read()

    def _read(self) -> dict[str, Any]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                return json.load(fh)
        except FileNotFoundError:
            return {"state": dict(self.initial_state), "calls": []}

    def log_call(self, data: dict[str, Any], op: str, run_id: str, key: str = "",
                 args: dict | None = None) -> None:
        data["calls"].append({"op": f"{self.name}.{op}", "run_id": run_id, "key": key,
                              "args": args or {}})


thermostat = DeviceStore("thermostat", {"celsius": 23.5})
lamp = DeviceStore("lamp", {"brightness": 80})
publisher = DeviceStore("publisher", {"published": []})

DEVICES = [thermostat, lamp, publisher]


def read_thermostat(room: str, *, run_id: str, key: str = "") -> dict[str, Any]:
    """Read the simulated thermostat: ``{"room": str, "celsius": float}``; logged.
    Armed faults (``runs.sim.faults``) fire before and after the logged read."""
    faults.fire("thermostat.read", "before", run_id)
    with thermostat.locked() as data:
        thermostat.log_call(data, "read", run_id, key, {"room": room})
        reading = {"room": room, "celsius": data["state"]["celsius"]}
    faults.fire("thermostat.read", "after", run_id)
    return reading


def device_calls(run_id: str) -> dict[str, int]:
    """Count of logged device calls for one run, e.g. ``{"thermostat.read": 1}``."""
    counts: Counter[str] = Counter()
    for device in DEVICES:
        for call in device.snapshot()["calls"]:
            if call["run_id"] == str(run_id):
                counts[call["op"]] += 1
    return dict(sorted(counts.items()))


def device_readings() -> dict[str, Any]:
    """Current device state worth showing, e.g. ``{"lamp.brightness": 80}``."""
    return {"lamp.brightness": lamp.snapshot()["state"]["brightness"]}
