"""The step thread owns the database; the agent's event loop runs beside it and asks.

A ``pydantic_ai.Agent`` runs its loop on an event loop of its own (in a helper thread),
while every ledger read and write happens on the step's thread, with the step's
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
"""

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from runs.engine.errors import CancelRequested, LeaseLost, OutcomeUnknown, StepError

CONTROL_EXCEPTIONS = (StepError, LeaseLost, CancelRequested, OutcomeUnknown)


class Bridge:
    """One agent run's link between its event loop and the step thread."""

    def __init__(self) -> None:
        self._requests: queue.Queue = queue.Queue()
        self.failure: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._waiting: set[concurrent.futures.Future] = set()

    async def ask(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the step thread and return its result (or raise its error)."""
        loop = asyncio.get_running_loop()
        self.loop = loop
        future = loop.create_future()
        self._requests.put((fn, loop, future))
        return await future

    def run_on_agent_loop(self, coro: Coroutine) -> Any:
        """From the step thread (or a call thread it started), inside ``fn``: run ``coro``
        on the agent's loop and wait. Raises ``concurrent.futures.CancelledError`` when
        the agent run ends first."""
        assert self.loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        self._waiting.add(future)
        try:
            return future.result()
        finally:
            self._waiting.discard(future)

    def run(self, target: Callable[[], Any]) -> Any:
        """Run ``target()`` (the agent run) in a helper thread while serving its requests
        on this thread; returns its result. Re-raises the kept control exception first,
        else what ``target`` raised."""
        box: dict[str, Any] = {}

        def main() -> None:
            try:
                box["result"] = target()
            except BaseException as exc:  # noqa: BLE001 - handed to the step thread
                box["error"] = exc

        thread = threading.Thread(target=main, name="agent-loop", daemon=True)
        thread.start()
        while thread.is_alive() or not self._requests.empty():
            try:
                fn, loop, future = self._requests.get(timeout=0.05)
            except queue.Empty:
                continue
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the agent loop
                if self.failure is None and isinstance(exc, CONTROL_EXCEPTIONS):
                    self.failure = exc
                    # The run is over: calls still waiting on the agent loop (one
                    # abandoned at its timeout) are cancelled while the loop still runs,
                    # so none is left pending when it stops.
                    for waiting in list(self._waiting):
                        waiting.cancel()
                loop.call_soon_threadsafe(_settle, future, None, exc)
            else:
                loop.call_soon_threadsafe(_settle, future, result, None)
        thread.join()
        for future in list(self._waiting):
            future.cancel()
        if self.failure is not None:
            raise self.failure
        if "error" in box:
            raise box["error"]
        return box.get("result")


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
