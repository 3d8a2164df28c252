"""Simulated outside world: devices with their own state and call logs.

These stand for systems AgentOps does not own (a thermostat, a lamp, a publisher). Each
keeps its state and a log of every call in its own JSON file under
``settings.AGENTOPS_DEVICE_DIR``, shared by all processes through an exclusive file lock,
so tests can count how often the outside world was really touched.
"""

import copy
import fcntl
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings

from lab.sim import faults


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
                data = json.load(fh)
        except FileNotFoundError:
            data = {}
        except ValueError:
            # Not JSON (or not UTF-8): not a file this device wrote.
            data = {}
        return self._shaped(data)

    def _shaped(self, data: Any) -> dict[str, Any]:
        """``data`` in the device's shape: a file of this name that the simulator did not
        write (another tool's ``payments.json``, an older layout) reads as the initial
        state plus what of it fits, so readers never meet a missing key."""
        if not isinstance(data, dict):
            data = {}
        state = data.get("state")
        calls = data.get("calls")
        return {
            **data,
            # A deep copy: a writer appends to the lists inside (``applied``).
            "state": copy.deepcopy(
                {**self.initial_state, **(state if isinstance(state, dict) else {})}
            ),
            "calls": [
                call
                for call in (calls if isinstance(calls, list) else [])
                if isinstance(call, dict)
                and isinstance(call.get("op"), str)
                and isinstance(call.get("run_id"), str)
            ],
        }

    def log_call(
        self, data: dict[str, Any], op: str, run_id: str, key: str = "", args: dict | None = None
    ) -> None:
        """Append one call to the log, keeping only the newest
        ``settings.AGENTOPS_SIM_CALL_LOG_MAX`` entries (the file is rewritten on every
        call, so an unbounded log would make every call slower)."""
        calls = data["calls"]
        calls.append({"op": f"{self.name}.{op}", "run_id": run_id, "key": key, "args": args or {}})
        del calls[: max(0, len(calls) - settings.AGENTOPS_SIM_CALL_LOG_MAX)]

    def reset(self) -> None:
        """Back to the initial state with an empty call log."""
        with self.locked() as data:
            data.clear()
            data.update({"state": dict(self.initial_state), "calls": []})


thermostat = DeviceStore("thermostat", {"celsius": 23.5})
lamp = DeviceStore("lamp", {"brightness": 80})
publisher = DeviceStore("publisher", {"published": [], "slots": {}})
newsfeed = DeviceStore("newsfeed", {})
booking = DeviceStore("booking", {"holds": {}, "payments": []})

# The simulator's registry: every module of ``lab.sim`` that defines a device appends
# it here on import; ``registered_devices()`` imports them all first.
DEVICES = [thermostat, lamp, publisher, booking, newsfeed]


def registered_devices() -> list[DeviceStore]:
    """Every simulated device, after importing each module of the ``lab.sim`` package
    (the shop and the order services register theirs on import, so a caller that has
    not imported them yet still sees them all)."""
    import importlib
    import pkgutil

    import lab.sim

    for module in pkgutil.iter_modules(lab.sim.__path__):
        importlib.import_module(f"lab.sim.{module.name}")
    return list(DEVICES)


def read_thermostat(room: str, *, run_id: str, key: str = "") -> dict[str, Any]:
    """Read the simulated thermostat: ``{"room": str, "celsius": float}``; logged.
    Armed faults (``lab.sim.faults``) fire before and after the logged read."""
    faults.fire("thermostat.read", "before", run_id)
    with thermostat.locked() as data:
        thermostat.log_call(data, "read", run_id, key, {"room": room})
        reading = {"room": room, "celsius": data["state"]["celsius"]}
    faults.fire("thermostat.read", "after", run_id)
    return reading


# -- the lamp ------------------------------------------------------------------------
# Test-controlled behaviour lives in the lamp's own state, like a real device's quirks:
#   "fail_next": {"get_brightness" | "set_brightness": ["RATE_LIMITED", ...]} makes the
#       next calls fail with those codes, one code per call (the call is still logged);
#   "delay_s": {"set_brightness": seconds} makes a set slow (the change lands at the end);
#   "unreadable": true makes every read fail; a list of run ids makes only those runs'
#       reads fail (a set with ``unreadable_after``, the ``--lamp-unreadable`` fault,
#       adds its run: the fault belongs to the run that asked for it).


def _take_failure(data: dict[str, Any], op: str) -> str | None:
    plan = data["state"].get("fail_next", {}).get(op) or []
    return plan.pop(0) if plan else None


def _raise_code(code: str, what: str):
    from runs.engine.errors import StepError

    raise StepError(code, f"simulated lamp: {what} failed with {code}")


#: How many runs' ``--lamp-unreadable`` faults the lamp remembers (oldest dropped).
UNREADABLE_RUNS_KEPT = 100


def _unreadable_for(state: dict[str, Any], run_id: str) -> bool:
    unreadable = state.get("unreadable")
    return unreadable is True or (isinstance(unreadable, list) and str(run_id) in unreadable)


def get_lamp_brightness(*, run_id: str, key: str = "", purpose: str = "read") -> dict[str, Any]:
    """Read the lamp: ``{"brightness": int}`` (percent); logged as ``lamp.get_brightness``.

    Raises ``StepError`` (``DEPENDENCY_UNAVAILABLE`` when unreadable, or an injected code).
    """
    with lamp.locked() as data:
        lamp.log_call(data, "get_brightness", run_id, key, {"purpose": purpose})
        code = _take_failure(data, "get_brightness")
        if code is None and _unreadable_for(data["state"], run_id):
            code = "DEPENDENCY_UNAVAILABLE"
        brightness = data["state"]["brightness"]
    if code:
        _raise_code(code, "get_brightness")
    return {"brightness": brightness}


def set_lamp_brightness(
    brightness: int, *, run_id: str, key: str = "", unreadable_after: bool = False
) -> dict[str, Any]:
    """Set the lamp to an absolute ``brightness`` (percent); logged as
    ``lamp.set_brightness``. Returns ``{"brightness": new, "previous": old}``.

    The lamp knows no idempotency keys: every call that does not fail changes it.
    ``unreadable_after`` (the ``--lamp-unreadable`` fault) leaves it unable to answer
    reads from this run (other runs still read it).
    """
    delay = lamp.snapshot()["state"].get("delay_s", {}).get("set_brightness")
    if delay:
        time.sleep(float(delay))
    with lamp.locked() as data:
        lamp.log_call(data, "set_brightness", run_id, key, {"brightness": brightness})
        code = _take_failure(data, "set_brightness")
        previous = data["state"]["brightness"]
        if code is None:
            data["state"]["brightness"] = brightness
            if unreadable_after:
                runs = data["state"].get("unreadable")
                runs = [*(runs if isinstance(runs, list) else []), str(run_id)]
                data["state"]["unreadable"] = runs[-UNREADABLE_RUNS_KEPT:]
    if code:
        _raise_code(code, "set_brightness")
    return {"brightness": brightness, "previous": previous}


# -- the booking service (hotel rooms, cars, payments, guest notices) -----------------


def hold(kind: str, guest: str, *, run_id: str, key: str) -> dict[str, Any]:
    """Hold a ``kind`` ("room", "car") for ``guest``. Idempotent by ``key``: a repeated
    key returns the first hold. Returns ``{"hold_id", "kind", "status"}``."""
    with booking.locked() as data:
        booking.log_call(data, "hold", run_id, key, {"kind": kind, "guest": guest})
        holds = data["state"]["holds"]
        for hold_id, h in holds.items():
            if h["key"] == key:
                return {"hold_id": hold_id, "kind": h["kind"], "status": h["status"]}
        hold_id = f"{kind}-{len(holds) + 1}"
        holds[hold_id] = {
            "kind": kind,
            "guest": guest,
            "key": key,
            "status": "held",
            "run_id": run_id,
        }
        return {"hold_id": hold_id, "kind": kind, "status": "held"}


def release(hold_id: str, *, run_id: str, key: str = "") -> dict[str, Any]:
    """Release a hold (no idempotency key: each call is one more release request).
    Returns ``{"hold_id", "status": "released"}``; ``StepError`` for an unknown hold."""
    with booking.locked() as data:
        booking.log_call(data, "release", run_id, key, {"hold_id": hold_id})
        h = data["state"]["holds"].get(hold_id)
        if h is not None:
            h["status"] = "released"
            h["releases"] = h.get("releases", 0) + 1
    if h is None:
        _raise_code("INVALID_ARGUMENT", f"release of unknown hold {hold_id}")
    return {"hold_id": hold_id, "status": "released"}


def hold_status(hold_id: str) -> str | None:
    """``"held"``, ``"released"`` or ``None`` (no such hold); not logged (a lookup)."""
    h = booking.snapshot()["state"]["holds"].get(hold_id)
    return h["status"] if h else None


def notify_guest(guest: str, text: str, *, run_id: str, key: str = "") -> dict[str, Any]:
    """Send the guest a message (cannot be unsent)."""
    with booking.locked() as data:
        booking.log_call(data, "notify", run_id, key, {"guest": guest, "text": text})
    return {"sent": True}


def pay(card: str, amount: int, *, run_id: str, key: str) -> dict[str, Any]:
    """Charge ``amount`` to ``card`` (idempotent by key); the card "declined" always
    fails with PERMISSION_DENIED."""
    with booking.locked() as data:
        booking.log_call(data, "pay", run_id, key, {"card": card, "amount": amount})
        declined = card == "declined"
        if not declined:
            payments = data["state"]["payments"]
            if not any(p["key"] == key for p in payments):
                payments.append({"key": key, "card": card, "amount": amount})
    if declined:
        _raise_code("PERMISSION_DENIED", "payment (card declined)")
    return {"paid": amount}


# -- the news feed and the publisher (weekly_report) ----------------------------------


def fetch_sources(week: str, *, run_id: str, key: str = "") -> list[dict[str, Any]]:
    """The simulated news feed's items for ``week``: ``[{"url", "title", "topic"}]``,
    deterministic, with two duplicate urls on purpose (deduplicate removes them); logged."""
    with newsfeed.locked() as data:
        newsfeed.log_call(data, "fetch", run_id, key, {"week": week})
    topics = ["reliability", "costs", "agents", "reliability", "evaluation", "agents"]
    items = [
        {
            "url": f"https://news.example/{week}/{i}",
            "title": f"{topic.title()} note {i}",
            "topic": topic,
        }
        for i, topic in enumerate(topics)
    ]
    return items + [dict(items[0]), dict(items[2])]


def reserve_slot(week: str, *, run_id: str, key: str = "") -> dict[str, Any]:
    """Hold the publisher's slot for ``week`` for this run: ``{"slot": week, "holder"}``.
    Idempotent per (week, run); logged."""
    with publisher.locked() as data:
        publisher.log_call(data, "reserve", run_id, key, {"week": week})
        slots = data["state"].setdefault("slots", {})
        slots[week] = run_id
        return {"slot": week, "holder": run_id}


def release_slot(week: str, *, run_id: str, key: str = "") -> dict[str, Any]:
    """Give the slot for ``week`` back if this run holds it (the compensation of
    ``reserve_slot``); logged. Returns ``{"slot", "released": bool}``."""
    with publisher.locked() as data:
        publisher.log_call(data, "release", run_id, key, {"week": week})
        slots = data["state"].setdefault("slots", {})
        released = slots.get(week) == run_id
        if released:
            del slots[week]
        return {"slot": week, "released": released}


def publish(title: str, body: str, *, run_id: str, key: str) -> dict[str, Any]:
    """Publish a document. The simulated publisher honours idempotency keys: a second
    call with the same key returns the first publication (still logged, so tests see
    every call). Returns ``{"publication_id", "title", "sha256"}``."""
    import hashlib

    with publisher.locked() as data:
        publisher.log_call(data, "publish", run_id, key, {"title": title})
        published = data["state"].setdefault("published", [])
        for item in published:
            if item["key"] == key:
                return item["receipt"]
        receipt = {
            "publication_id": f"pub-{len(published) + 1}",
            "title": title,
            "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest(),
        }
        published.append({"key": key, "run_id": run_id, "receipt": receipt})
        return receipt


def device_calls(run_id: str) -> dict[str, int]:
    """Count of logged device calls for one run, e.g. ``{"thermostat.read": 1,
    "lamp.set_brightness": 1}``."""
    counts: Counter[str] = Counter()
    for device in registered_devices():
        for call in device.snapshot()["calls"]:
            if call["run_id"] == str(run_id):
                counts[call["op"]] += 1
    return dict(sorted(counts.items()))


def reset_world() -> list[str]:
    """Every simulated device back to its initial state with an empty call log, and
    every armed fault disarmed. Returns the device names reset."""
    every = registered_devices()
    for device in every:
        device.reset()
    faults.clear()
    return [device.name for device in every]


def world_status() -> dict[str, Any]:
    """``{device name: {"state": {...}, "calls": int, "by_op": {op: int}}, "faults": {...}}``:
    what ``sim status`` shows."""
    status: dict[str, Any] = {}
    for device in registered_devices():
        data = device.snapshot()
        by_op = Counter(call["op"] for call in data["calls"])
        status[device.name] = {
            "state": data["state"],
            "calls": len(data["calls"]),
            "by_op": dict(sorted(by_op.items())),
        }
    status["faults"] = faults.armed()
    return status


def device_readings() -> dict[str, Any]:
    """Current device state worth showing, e.g. ``{"lamp.brightness": 80}``."""
    return {"lamp.brightness": lamp.snapshot()["state"]["brightness"]}
