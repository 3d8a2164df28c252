"""Waiting in tests: the one helper that polls a condition until a deadline.

A test waits for the condition it needs (a row, a status, a log line), never for a
guessed number of seconds: on a loaded machine a guess is either too short (a flaky
test) or too long (a slow one).
"""

import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any

from tests.support.services import Deployment


def wait_until(
    check: Callable[[], Any],
    *,
    what: str,
    timeout: float = 120,
    interval: float = 0.2,
    procs: Iterable[subprocess.Popen] = (),
) -> Any:
    """Call ``check()`` until it returns something truthy and return that value.

    ``timeout`` (seconds) bounds a hang; it is not a timing assertion. Past it the test
    fails with ``AssertionError`` naming ``what`` and ``check``'s last value, followed by
    the last 3000 characters of the output of each of ``procs`` (processes started with
    ``Deployment.popen``). ``interval`` is the pause between two calls of ``check``.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            logs = "".join(
                f"\n--- {_command(p)} ---\n" + "\n".join(Deployment.logs(p))[-3000:] for p in procs
            )
            raise AssertionError(
                f"timed out after {timeout:g}s waiting for {what}; last value: {value!r}{logs}"
            )
        time.sleep(interval)


def _command(proc: subprocess.Popen) -> str:
    args = proc.args
    return " ".join(map(str, args)) if isinstance(args, (list, tuple)) else str(args)
