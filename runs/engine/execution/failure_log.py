"""Logging for a loop that keeps failing the same way (the database or Redis away for a
while): the first failure with its traceback, then one line every ``every`` seconds, and
one line when the loop works again. A worker polling every 0.5 s through a 10 s outage
otherwise writes 20 tracebacks that hide everything else in its log."""

import logging
import time


class RepeatedFailureLog:
    """Tracks one loop's failures for ``what`` (e.g. ``"sweep"``) on ``logger``.

    Call ``failed()`` from inside an ``except`` block (it logs ``exc_info`` on the first
    failure of a streak) and ``succeeded()`` after a round that worked.
    """

    def __init__(self, logger: logging.Logger, what: str, *, every: float = 30.0):
        self.logger = logger
        self.what = what
        self.every = every
        self._since: float | None = None
        self._last_line = 0.0
        self._count = 0

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        self._count += 1
        if self._since is None:
            self._since = self._last_line = now
            self.logger.warning("%s failed; retrying", self.what, exc_info=True)
        elif now - self._last_line >= self.every:
            self._last_line = now
            self.logger.warning(
                "%s still failing after %.0f s (%d tries): %s: %s",
                self.what,
                now - self._since,
                self._count,
                type(exc).__name__,
                str(exc).strip().splitlines()[0] if str(exc).strip() else "",
            )

    def succeeded(self) -> None:
        if self._since is not None:
            self.logger.warning(
                "%s works again after %.0f s (%d failed tries)",
                self.what,
                time.monotonic() - self._since,
                self._count,
            )
        self._since = None
        self._count = 0
