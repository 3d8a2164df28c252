"""Calling the outside world with a timeout (DESIGN section 11: the engine enforces
timeouts itself, RQ's job timeout is not used).

A Python thread cannot be killed, so a call that overruns is abandoned, not stopped: it
runs on in a daemon thread and, if it finishes later, ``on_late(result)`` records what it
did (a fact about the outside world worth keeping).
"""

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection

from agentops.db_pool import release_connection

#: The name of every thread running an outside call (so a test harness can wait for an
#: abandoned one before its database goes away).
THREAD_NAME = "outside-call"


class CallTimedOut(Exception):
    """The call did not finish within ``timeout`` seconds (it may still finish later)."""

    def __init__(self, timeout: float):
        super().__init__(f"call exceeded its timeout of {timeout}s")
        self.timeout = timeout


def call_with_timeout(
    fn: Callable[[], Any], timeout: float | None, on_late: Callable[[Any], None] | None = None
) -> Any:
    """Return ``fn()``, or raise ``CallTimedOut`` after ``timeout`` seconds (``None``:
    no limit, called inline). Exceptions of ``fn`` propagate unchanged. The caller's
    pooled database connection goes back to the pool first: no connection is held
    while the outside world answers."""
    release_connection()
    if not timeout:
        return fn()
    box: dict[str, Any] = {}
    finished = threading.Event()
    lock = threading.Lock()

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            box["error"] = exc
        with lock:
            finished.set()
            abandoned = box.get("abandoned", False)
        if abandoned and on_late is not None and "result" in box:
            try:
                on_late(box["result"])
            finally:
                connection.close()

    thread = threading.Thread(target=target, name=THREAD_NAME, daemon=True)
    thread.start()
    finished.wait(timeout)
    with lock:
        if not finished.is_set():
            box["abandoned"] = True
            raise CallTimedOut(timeout)
    if "error" in box:
        raise box["error"]
    return box["result"]
