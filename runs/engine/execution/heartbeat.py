"""One heartbeat thread per worker process, off the hot path.

Every step this process runs is registered with the process's ``LeaseKeeper`` while
it runs. One daemon thread renews all of their leases every third of the lease length
in one statement, fenced by each step's attempt, which also reads each renewed step's
run status (or that a pause is requested); it raises the step context's
``lease_lost`` / ``cancel_requested`` flags, which that step alone sees at its next safe
point. No thread is started per step.

``LIVENESS_HOOKS`` are called on each beat with the worker id (a worker-liveness
signal, e.g. a session advisory lock, plugs in there).
"""

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection

from agentops.db_pool import release_connection
from runs.engine.execution.failure_log import RepeatedFailureLog
from runs.engine.state.leases import PAUSE_REQUESTED
from runs.engine.state.store import store
from runs.states import RUN_TERMINAL, RunStatus

if TYPE_CHECKING:  # the step context imports the engine that imports this module
    from runs.engine.execution.step_context import StepContext

logger = logging.getLogger("agentops.heartbeat")

#: ``fn(worker_ids)`` called on every beat with the ids of the workers whose steps this
#: process holds (after the leases were renewed).
LIVENESS_HOOKS: list[Callable[[set[str]], None]] = []


#: Run statuses that stop a renewed step at its next safe point: its run was asked to
#: cancel or to pause (the executor then gives the step back instead of cancelling it),
#: or ended under it.
STOP_STATUSES = frozenset({RunStatus.CANCEL_REQUESTED, PAUSE_REQUESTED, *RUN_TERMINAL})

#: How long the heartbeat thread waits, once nothing is held, before it ends (seconds).
IDLE_GRACE_SECONDS = 1.0


class LeaseKeeper:
    """Renews the leases of the steps held by this process (see the module docstring).

    ``hold(ctx)`` registers a running step's context, ``release(ctx)`` forgets it;
    both are cheap (no database work). The thread starts on the first ``hold`` and
    ends (closing its connection) once nothing is held.
    """

    def __init__(self, ttl: float | None = None):
        self.ttl = ttl if ttl is not None else settings.AGENTOPS_LEASE_SECONDS
        self.interval = max(0.05, self.ttl / 3)
        self._held: dict[int, StepContext] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, ctx: "StepContext") -> None:
        """Keep ``ctx.step``'s lease (attempt ``ctx.attempt``) alive while it runs."""
        with self._lock:
            self._held[id(ctx)] = ctx
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
                self._thread.start()

    def release(self, ctx: "StepContext") -> None:
        """Stop renewing ``ctx``'s lease (its attempt has ended)."""
        with self._lock:
            self._held.pop(id(ctx), None)
            if not self._held:
                self._wake.set()

    def beat(self) -> None:
        """One beat: renew every held lease (fenced), flag lost leases and cancel
        requests. Database errors propagate to the caller."""
        with self._lock:
            held = list(self._held.values())
        if not held:
            return
        kept = store().heartbeat([(c.step.pk, c.attempt) for c in held], self.ttl)
        for ctx in held:
            status = kept.get(ctx.step.pk)
            if status is None:
                ctx.lease_lost.set()
                continue
            ctx.lease_renewed()
            if status in STOP_STATUSES:
                ctx.cancel_requested.set()
        for hook in LIVENESS_HOOKS:
            hook({c.worker_id for c in held})

    def _loop(self) -> None:
        # The database away for a while fails every beat the same way: one line per period.
        failures = RepeatedFailureLog(logger, "heartbeat")
        try:
            while True:
                self._wake.wait(self.interval)
                self._wake.clear()
                if not self._held:
                    # Idle: linger briefly so a chain's next step reuses this thread,
                    # then end and give the connection back.
                    time.sleep(IDLE_GRACE_SECONDS)
                    with self._lock:
                        if not self._held:
                            self._thread = None
                            return
                try:
                    self.beat()
                    failures.succeeded()
                except Exception as exc:  # noqa: BLE001 - a failed beat must not kill the steps; the lease rules decide
                    failures.failed(exc)
                    connection.close()
                release_connection()
        finally:
            connection.close()


_keeper: LeaseKeeper | None = None
_keeper_lock = threading.Lock()


def keeper() -> LeaseKeeper:
    """This process's ``LeaseKeeper`` (created on first use with the configured lease
    length, in seconds)."""
    global _keeper
    with _keeper_lock:
        if _keeper is None or _keeper.ttl != settings.AGENTOPS_LEASE_SECONDS:
            _keeper = LeaseKeeper()
        return _keeper
