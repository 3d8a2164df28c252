"""The step thread owns the database; the agent's event loop runs beside it and asks.

A ``pydantic_ai.Agent`` runs on the process's event loop (``runs.engine.execution.aio``,
shared by every run so async clients and MCP sessions outlive one run), while every
ledger read and write happens on the step's thread, with the step's
database connection, lease and safe points. ``Bridge.ask(fn)`` (from the agent loop)
queues ``fn`` for the step thread and awaits its result; ``fn`` may in turn run a
coroutine back on the agent loop (``run_on_agent_loop``), which is free meanwhile, to
make the real model request or tool call. The first control exception a request
raises (``StepError``, ``LeaseLost``, ``OutcomeUnknown``, ...) is kept and re-raised on
the step thread once the agent run ends, whatever Pydantic AI made of it on the way.
A call still waiting on the agent loop when a control exception ends the run (a model
request or tool call abandoned at its timeout) is cancelled at once, while the loop
still runs, and any left when the run ends is cancelled then, so the thread waiting for
it does not wait forever.

The tool calls of one model response run at once (Pydantic AI's parallel mode):
``ask(fn, own_thread=True)`` serves ``fn`` on a thread of its own, with its own database
connection (closed when it ends), so the step thread and the other calls go on
meanwhile. ``run`` returns only when every such thread has ended.
"""

import asyncio
import concurrent.futures
import contextvars
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from django.db import connection

from runs.engine.errors import CancelRequested, LeaseLost, OutcomeUnknown, StepError
from runs.engine.execution import aio

CONTROL_EXCEPTIONS = (StepError, LeaseLost, CancelRequested, OutcomeUnknown)


class Bridge:
    """One agent run's link between its event loop and the step thread."""

    def __init__(self) -> None:
        self._requests: queue.Queue = queue.Queue()
        self.failure: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._waiting: set[concurrent.futures.Future] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    async def ask(self, fn: Callable[[], Any], *, own_thread: bool = False) -> Any:
        """Run ``fn()`` on the step thread (``own_thread``: on a thread of its own, started
        by the step thread) and return its result (or raise its error)."""
        loop = asyncio.get_running_loop()
        self.loop = loop
        future = loop.create_future()
        self._requests.put((fn, loop, future, own_thread))
        return await future

    def run_on_agent_loop(self, coro: Coroutine) -> Any:
        """From the step thread (or a call thread it started), inside ``fn``: run ``coro``
        on the agent's loop and wait. Raises ``concurrent.futures.CancelledError`` when
        the agent run ends first."""
        assert self.loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        with self._lock:
            self._waiting.add(future)
        try:
            return future.result()
        finally:
            with self._lock:
                self._waiting.discard(future)

    def _cancel_waiting(self, loop) -> None:
        with self._lock:
            waiting = list(self._waiting)
        for future in waiting:
            loop.call_soon_threadsafe(future.cancel)

    def run(self, coro: Coroutine) -> Any:
        """Run ``coro`` (the agent run) on the process's event loop (``aio``) while
        serving its requests on this thread; returns its result. Re-raises the kept
        control exception first, else what ``coro`` raised."""
        done = object()
        self.loop = aio.loop()
        future = aio.submit(coro)
        future.add_done_callback(lambda _: self._requests.put(done))
        while True:
            request = self._requests.get()
            if request is done:
                break
            fn, loop, waiter, own_thread = request
            if own_thread:
                # The step's context (its attempt's log) goes along to the thread.
                thread = threading.Thread(
                    target=contextvars.copy_context().run,
                    args=(self._serve_alone, fn, loop, waiter),
                    name="agent-tool-call",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._serve(fn, loop, waiter)
        # A tool call still in flight (its task cancelled with the run) ends first.
        self._cancel_waiting(self.loop)
        for thread in self._threads:
            thread.join()
        self._cancel_waiting(self.loop)
        if self.failure is not None:
            raise self.failure
        return future.result()

    def _serve(self, fn: Callable[[], Any], loop, waiter: asyncio.Future) -> None:
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the agent loop
            with self._lock:
                first = self.failure is None and isinstance(exc, CONTROL_EXCEPTIONS)
                if first:
                    self.failure = exc
            if first:
                # The run is over: calls still waiting on the agent loop (one abandoned
                # at its timeout) are cancelled, so the agent run ends.
                self._cancel_waiting(loop)
            loop.call_soon_threadsafe(_settle, waiter, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, waiter, result, None)

    def _serve_alone(self, fn: Callable[[], Any], loop, waiter: asyncio.Future) -> None:
        try:
            self._serve(fn, loop, waiter)
        finally:
            connection.close()


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
