"""SIGTERM, SIGHUP and Ctrl-C stop ``bench``, ``soak`` and ``drill`` cleanly.

Python's default SIGTERM ends the process without unwinding, which left the worker
processes a ``Sandbox`` started (each in its own session, so a terminal's Ctrl-C does not
reach them either) running on their own. ``stop_on_signals`` turns those signals into an
``Interrupted`` exception in the main thread instead: every ``with Sandbox(...)`` block
unwinds and kills and reaps its processes, drops its scratch database, and the command
exits with 128 + the signal number, as a shell reports a signalled process.
"""

import contextlib
import signal

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(BaseException):
    """A terminating signal arrived. A ``BaseException`` (as ``KeyboardInterrupt``), so
    the drills' ``except Exception`` blocks let it through to the cleanup."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def stop_on_signals():
    """Raise ``Interrupted`` on the first SIGTERM/SIGINT/SIGHUP inside the block; later
    signals are ignored so they cannot cut the cleanup short. The previous handlers are
    restored at the end. Main thread only (``signal.signal``'s rule)."""
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    received: list[int] = []

    def handler(signum, _frame):
        if received:
            return
        received.append(signum)
        raise Interrupted(signum)

    for sig in SIGNALS:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
