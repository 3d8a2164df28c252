"""One long-lived asyncio event loop per process, for the async code steps use.

Async clients and toolsets (an MCP server's session, an HTTP client pool) bind
themselves to the loop they were first used on; a loop per call or per run leaves them
bound to a closed one, so the second run in a process fails. Every run of the process
therefore uses this one loop, run by a daemon thread that starts on first use.

``submit(coro)`` schedules a coroutine and returns a ``concurrent.futures.Future``;
``run(coro, timeout=None)`` waits for it. Both may be called from many threads at once
(each slot of a worker runs its steps on a thread of its own); never from a coroutine on
this loop itself, which would wait for itself. A child forked from the process starts
its own loop (the parent's thread does not exist in it).
"""

import asyncio
import concurrent.futures
import contextvars
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _forget_loop_in_child() -> None:
    """A forked child (RQ's work horse) has no copy of the loop's thread: it starts a
    loop of its own on first use instead of waiting on its parent's forever."""
    global _loop, _lock
    _loop = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_loop_in_child)


def loop() -> asyncio.AbstractEventLoop:
    """The process's loop, started (with its daemon thread ``agentops-aio``) on first use."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            started = threading.Event()
            new = asyncio.new_event_loop()

            def main() -> None:
                asyncio.set_event_loop(new)
                new.call_soon(started.set)
                new.run_forever()

            threading.Thread(target=main, name="agentops-aio", daemon=True).start()
            started.wait()
            _loop = new
        return _loop


def submit(coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
    """Schedule ``coro`` on the process's loop; returns its future (``cancel()`` cancels
    the coroutine). Raises ``RuntimeError`` when called from the loop's own thread."""
    target = loop()
    if _on_loop(target):
        coro.close()
        raise RuntimeError("aio.submit called from its own event loop: await the coroutine")
    # The coroutine runs as a task of the loop's thread; it takes the caller's context
    # along (its attempt's log among it), as a thread of the caller's own would.
    return asyncio.run_coroutine_threadsafe(_in_context(coro, contextvars.copy_context()), target)


async def _in_context(coro: Coroutine[Any, Any, T], context: contextvars.Context) -> T:
    """Await ``coro`` with the values of ``context`` set in this task's own context."""
    for var, value in context.items():
        var.set(value)
    return await coro


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the process's loop and return its result (or raise its error).
    ``timeout`` in seconds (``None``: no limit): past it the coroutine is cancelled and
    ``TimeoutError`` raised."""
    future = submit(coro)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"no result within {timeout}s") from None


def on_loop() -> bool:
    """True when called from a coroutine (or callback) running on the process's loop."""
    return _loop is not None and _on_loop(_loop)


def _on_loop(target: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is target
    except RuntimeError:
        return False
