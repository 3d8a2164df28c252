"""The process's one event loop (runs/engine/execution/aio.py), called from many threads."""

import asyncio
import os
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


def test_a_forked_child_runs_coroutines_on_a_loop_of_its_own():
    """RQ's forking worker forks after the parent started its loop (a worker warms its
    model first): the child has no copy of the loop's thread, so it starts its own."""
    _, parent_loop = aio.run(_loop_of(0))
    pid = os.fork()
    if pid == 0:  # the child: report by exit code only
        code = 1
        try:
            # Without a loop of its own the child would wait here until the timeout.
            value, _ = aio.run(_loop_of(7), timeout=30)
            code = 0 if value == 7 else 2
        except BaseException:  # noqa: BLE001 - any failure is the child's exit code
            code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert aio.run(_loop_of(1))[1] == parent_loop
