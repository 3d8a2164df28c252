"""The process's one event loop (runs/engine/execution/aio.py), called from many threads."""

import asyncio
import threading

import pytest

from runs.engine.execution import aio


async def _loop_of(value: int) -> tuple[int, int]:
    await asyncio.sleep(0)
    return value, id(asyncio.get_running_loop())


def test_it_runs_coroutines_from_many_threads_on_one_loop():
    results: list[tuple[int, int]] = []
    lock = threading.Lock()

    def slot(i: int) -> None:
        for j in range(20):
            answer = aio.run(_loop_of(i * 100 + j))
            with lock:
                results.append(answer)

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(v for v, _ in results) == sorted(i * 100 + j for i in range(8) for j in range(20))
    assert {loop for _, loop in results} == {id(aio.loop())}


def test_a_timeout_cancels_the_coroutine_and_raises():
    cancelled = threading.Event()

    async def forever():
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(TimeoutError):
        aio.run(forever(), timeout=0.05)
    assert cancelled.wait(5)
    assert aio.run(_loop_of(1))[0] == 1  # the loop goes on


def test_it_hands_back_the_coroutines_error():
    async def broken():
        raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        aio.run(broken())


def test_a_coroutine_on_the_loop_cannot_wait_for_the_loop():
    async def inner():
        return 1

    async def outer():
        with pytest.raises(RuntimeError, match="own event loop"):
            aio.submit(inner())
        return "refused"

    assert aio.run(outer()) == "refused"
