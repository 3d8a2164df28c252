"""Simulated external systems that keep their own ledgers, for the synthetic order
workflow, the drills and the soak.

Each system records every request (``calls``, counted by ``devices.device_calls``) and
every effect it applied (``state["applied"]``: ``[{"key", "run_id", "op", ...}]``), so
the soak can check from the outside world's own books that an effect happened at most
once per idempotency key:

- ``payments.charge``: idempotent; a second request with the same key returns the first
  charge and applies nothing;
- ``inventory.reserve`` / ``inventory.release``: idempotent the same way (release is the
  compensation of reserve);
- ``mailer.send``: unsafe, it applies every request it gets; ``mailer.verify`` answers
  whether a message with a key was sent (the ``verify`` hook of the tool).

Requests sleep ``latency_ms`` (a slow outside system) so faults can land mid-call.
"""

import time
from typing import Any

from lab.sim import devices, faults
from lab.sim.devices import DeviceStore

payments = DeviceStore("payments", {"applied": []})
inventory = DeviceStore("inventory", {"applied": []})
mailer = DeviceStore("mailer", {"applied": []})

SYSTEMS = [payments, inventory, mailer]
for _system in SYSTEMS:
    if _system not in devices.DEVICES:
        devices.DEVICES.append(_system)


def _request(
    store: DeviceStore,
    op: str,
    args: dict[str, Any],
    *,
    run_id: str,
    key: str,
    idempotent: bool,
    latency_ms: int = 0,
) -> dict[str, Any]:
    """Apply one request: log it, apply its effect unless an idempotent system has seen
    the key, and return ``{"ref", "key", "replayed"}``."""
    name = f"{store.name}.{op}"
    faults.fire(name, "before", run_id)
    if latency_ms:
        time.sleep(latency_ms / 1000)
    with store.locked() as data:
        store.log_call(data, op, run_id, key, args)
        applied = data["state"].setdefault("applied", [])
        previous = next((a for a in applied if a["key"] == key and a["op"] == op), None)
        if idempotent and previous is not None:
            result = {"ref": previous["ref"], "key": key, "replayed": True}
        else:
            ref = f"{store.name}-{len(applied) + 1}"
            applied.append({"key": key, "run_id": run_id, "op": op, "ref": ref, "args": args})
            result = {"ref": ref, "key": key, "replayed": False}
    faults.fire(name, "after", run_id)
    return result


def charge(args: dict, *, run_id: str, key: str) -> dict[str, Any]:
    """Charge ``args["amount"]`` (idempotent by ``key``)."""
    return _request(
        payments,
        "charge",
        args,
        run_id=run_id,
        key=key,
        idempotent=True,
        latency_ms=int(args.get("latency_ms", 0)),
    )


def reserve(args: dict, *, run_id: str, key: str) -> dict[str, Any]:
    """Reserve ``args["qty"]`` of ``args["sku"]`` (idempotent by ``key``)."""
    return _request(
        inventory,
        "reserve",
        args,
        run_id=run_id,
        key=key,
        idempotent=True,
        latency_ms=int(args.get("latency_ms", 0)),
    )


def release(args: dict, *, run_id: str, key: str) -> dict[str, Any]:
    """Release a reservation (the compensation of ``reserve``; idempotent by ``key``)."""
    return _request(inventory, "release", args, run_id=run_id, key=key, idempotent=True)


def send_mail(args: dict, *, run_id: str, key: str) -> dict[str, Any]:
    """Send a message (unsafe: every request is applied, even with a repeated key)."""
    return _request(
        mailer,
        "send",
        args,
        run_id=run_id,
        key=key,
        idempotent=False,
        latency_ms=int(args.get("latency_ms", 0)),
    )


def mail_sent(key: str) -> dict[str, Any] | None:
    """The first message sent with ``key``, or ``None`` (what ``verify`` asks)."""
    return next(
        (
            a
            for a in mailer.snapshot()["state"].get("applied", [])
            if a["key"] == key and a["op"] == "send"
        ),
        None,
    )


def applied_effects() -> list[dict[str, Any]]:
    """Every effect applied by every system: ``[{"system", "op", "key", "run_id", "ref"}]``."""
    return [
        {"system": store.name, **{k: a[k] for k in ("op", "key", "run_id", "ref")}}
        for store in SYSTEMS
        for a in store.snapshot()["state"].get("applied", [])
    ]
