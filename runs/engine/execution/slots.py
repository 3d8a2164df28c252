"""Execution slots: up to N steps of one worker process at once, each in a slot thread.

A step spends almost all of its time waiting on a model or a tool, so a worker process
runs several: each slot is a thread that runs one step and the chain its commits lead
to (``executor.run_chain``). Plain ``def`` steps and tools run unchanged; the one
heartbeat thread of the process (``heartbeat.LeaseKeeper``) renews every slot's lease.

With one slot nothing is threaded: ``submit`` runs the step in the caller's thread, as
a worker always did. A slot holds a database connection only inside its short
transactions: it gives its connection back (``agentops.db_pool.release_connection``)
after each step and before it waits on the step's code or an outside call.

An exception that escapes the engine while a slot runs ends that slot's work, is logged,
and leaves every other slot running; the step itself is recovered by its lease.
"""

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import InterfaceError, OperationalError

from agentops.db_pool import release_connection

logger = logging.getLogger("agentops.worker")

#: Most slots one process may run (each is a thread with its own stack).
MAX_SLOTS = 1000


class Slots:
    """``size`` execution slots running ``run(step_id, claimed) -> steps executed``.

    ``free()`` counts the idle slots, ``wait_free(timeout)`` waits for one,
    ``submit(step_id, claimed=None)`` hands a step (``claimed``: already claimed for this
    worker) to an idle slot (``RuntimeError`` when none is idle), ``drain()`` waits
    until every slot is idle. ``pending`` holds the ids of
    steps handed to a slot and not yet done, so a claim loop does not hand one twice.
    ``size`` is 1 to ``MAX_SLOTS`` (else ``ValueError``).
    """

    def __init__(self, size: int, run: Callable[[int, Any], int]):
        if not 1 <= size <= MAX_SLOTS:
            raise ValueError(f"a worker runs 1 to {MAX_SLOTS} slots, got {size}")
        self.size = size
        self._run = run
        self._busy = 0
        self.pending: set[int] = set()
        self._changed = threading.Condition()
        self._threads = (
            ThreadPoolExecutor(max_workers=size, thread_name_prefix="slot") if size > 1 else None
        )

    @property
    def threaded(self) -> bool:
        """True when steps run in slot threads (more than one slot)."""
        return self._threads is not None

    def busy(self) -> int:
        """Slots running a step now."""
        with self._changed:
            return self._busy

    def free(self) -> int:
        """Idle slots now."""
        with self._changed:
            return self.size - self._busy

    def wait_free(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for an idle slot; True when there is one."""
        with self._changed:
            return self._changed.wait_for(lambda: self._busy < self.size, timeout)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every slot is idle (``None``: as long as it takes); True when so."""
        with self._changed:
            return self._changed.wait_for(lambda: self._busy == 0, timeout)

    def submit(self, step_id: int, claimed: Any = None) -> int:
        """Run ``step_id`` (and its chain) in an idle slot. Threaded: returns 0 at once;
        one slot: runs it here and returns the steps executed."""
        with self._changed:
            if self._busy >= self.size:
                raise RuntimeError("no idle execution slot")
            self._busy += 1
            self.pending.add(step_id)
        if self._threads is None:
            return self._execute(step_id, claimed)
        self._threads.submit(self._execute, step_id, claimed)
        return 0

    def shutdown(self) -> None:
        """Wait for every slot, then end the slot threads."""
        self.drain()
        if self._threads is not None:
            self._threads.shutdown(wait=True)

    def _execute(self, step_id: int, claimed: Any) -> int:
        try:
            if self._threads is None:
                # Inline: the caller's loop reports database outages and engine errors.
                return self._run(step_id, claimed)
            try:
                return self._run(step_id, claimed)
            except (OperationalError, InterfaceError) as exc:
                # The database went away under this slot; the step's lease (or
                # liveness) gives it to a worker that can reach the database.
                logger.warning("slot lost the database on step %s: %s", step_id, exc)
            except Exception:  # noqa: BLE001 - one slot's trouble must never end the others
                logger.exception("a slot failed on step %s; the worker goes on", step_id)
            return 0
        finally:
            if self._threads is not None:
                release_connection(force=True)
            with self._changed:
                self._busy -= 1
                self.pending.discard(step_id)
                self._changed.notify_all()
