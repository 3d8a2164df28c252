"""Calling the outside world with a timeout: the engine enforces timeouts itself, RQ's
job timeout is not used.

A Python thread cannot be killed, so a call that overruns is abandoned, not stopped: it
runs on in a daemon thread and, if it finishes later, ``on_late(result)`` records what it
did (a fact about the outside world worth keeping).
"""

import contextvars
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.db import connection

from agentops.db_pool import release_connection

#: The name of every thread running an outside call (so a test harness can wait for an
#: abandoned one before its database goes away).
THREAD_NAME = "outside-call"

T = TypeVar("T")


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

    # The caller's context (its attempt's log) goes along to the thread.
    thread = threading.Thread(
        target=contextvars.copy_context().run, args=(target,), name=THREAD_NAME, daemon=True
    )
    thread.start()
    finished.wait(timeout)
    with lock:
        if not finished.is_set():
            box["abandoned"] = True
            raise CallTimedOut(timeout)
    if "error" in box:
        raise box["error"]
    return box["result"]


def iterate_with_timeout(source: Callable[[], Iterator[T]], timeout: float | None) -> Iterator[T]:
    """Yield the items of ``source()`` (a stream from the outside world, e.g. a model's
    reply piece by piece) as they arrive, and raise ``CallTimedOut`` once ``timeout``
    seconds have passed since the call began without the stream having ended (``None``:
    no limit, iterated inline). The whole stream is one call: a reply that stalls
    between pieces, or only streams slowly, is held to the same limit as one that
    answers at once. The items are consumed here, on the caller's thread (which may
    write each to the database); the stream itself is read in an ``outside-call``
    thread, which stops at its next item once the caller has gone (timeout, error, or
    an early stop) and closes the stream. Exceptions of the stream propagate."""
    if not timeout:
        yield from source()
        return
    arrived: queue.Queue = queue.Queue()
    gone = threading.Event()

    def read() -> None:
        try:
            stream = source()
            try:
                for item in stream:
                    if gone.is_set():
                        break
                    arrived.put(("item", item))
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            arrived.put(("error", exc))
        else:
            arrived.put(("end", None))
        finally:
            connection.close()

    # The caller's context (its attempt's log) goes along to the thread.
    thread = threading.Thread(
        target=contextvars.copy_context().run, args=(read,), name=THREAD_NAME, daemon=True
    )
    deadline = time.monotonic() + timeout
    thread.start()
    try:
        while True:
            try:
                kind, value = arrived.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise CallTimedOut(timeout) from None
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        gone.set()
