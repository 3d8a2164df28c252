"""Each attempt's log: the ``logging`` records and stdout/stderr writes of a step's code
(and of the tools it calls), captured per slot thread while the attempt runs and stored
with the attempt when it ends, the newest ``AGENTOPS_ATTEMPT_LOG_BYTES`` bytes of it.

A worker runs several steps at once in slot threads, so capture routes by the current
attempt held in a context variable (each thread has its own; ``call_with_timeout``
threads copy their caller's). One process-wide stdout/stderr proxy and one root logging
handler are installed on first use; writes from threads without an attempt (the worker's
own progress lines) reach the real streams unchanged.
"""

import contextvars
import logging
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from django.conf import settings
from django.db import DatabaseError

from runs.engine.state import values

logger = logging.getLogger("agentops.attempt_logs")


class AttemptLogBuffer:
    """The newest ``limit`` bytes (UTF-8) written by one attempt. ``total_bytes`` counts
    every byte written; ``truncated`` is true once older bytes were cut. Thread-safe:
    a step's tool threads write beside it."""

    def __init__(self, limit: int):
        self.limit = limit
        self.total_bytes = 0
        self.truncated = False
        self._data = bytearray()
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        """Append ``text``; a lone surrogate is kept as its ``\\udXXX`` escape (as
        stored text keeps it) rather than fail the write."""
        data = text.encode("utf-8", "backslashreplace") if text else b""
        with self._lock:
            self.total_bytes += len(data)
            self._data += data
            # Cut at twice the bound so a stream of small writes is not cut on each one.
            if len(self._data) > 2 * self.limit:
                del self._data[: len(self._data) - self.limit]
                self.truncated = True

    def text(self) -> str:
        """The kept text: the newest ``limit`` bytes, starting at a whole character."""
        with self._lock:
            data = bytes(self._data)
            truncated = self.truncated or len(data) > self.limit
        if len(data) > self.limit:
            data = data[len(data) - self.limit :]
        self.truncated = truncated
        # A cut may split a character: the decoder drops its tail bytes.
        return data.decode("utf-8", "ignore") if truncated else data.decode("utf-8", "replace")


_current: contextvars.ContextVar[AttemptLogBuffer | None] = contextvars.ContextVar(
    "attempt_log", default=None
)


class _RoutedStream:
    """A stdout/stderr stand-in: a write from a thread running an attempt goes to that
    attempt's log, any other write to the real stream."""

    def __init__(self, real: TextIO):
        self.real = real

    def write(self, text: str) -> int:
        buffer = _current.get()
        if buffer is None:
            return self.real.write(text)
        buffer.write(text)
        return len(text)

    def flush(self) -> None:
        if _current.get() is None:
            self.real.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class _RoutedHandler(logging.Handler):
    """Root logging handler: a record emitted in a thread running an attempt goes to
    that attempt's log (records pass the configured levels first, ``AGENTOPS_LOG_LEVEL``
    for the root)."""

    def emit(self, record: logging.LogRecord) -> None:
        buffer = _current.get()
        if buffer is None:
            return
        try:
            buffer.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is dropped
            self.handleError(record)


_installed = False
_install_lock = threading.Lock()
_real_stdout: TextIO = sys.stdout


def install() -> None:
    """Install the stdout/stderr proxies and the root handler once per process."""
    global _installed, _real_stdout
    with _install_lock:
        if _installed:
            return
        _real_stdout = sys.stdout
        sys.stdout = _RoutedStream(sys.stdout)
        sys.stderr = _RoutedStream(sys.stderr)
        handler = _RoutedHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
        _installed = True


def real_stdout() -> TextIO:
    """The process's stdout as it was before capture: for the worker's own lines."""
    return _real_stdout if _installed else sys.stdout


@contextmanager
def capturing() -> Iterator[AttemptLogBuffer]:
    """Route this thread's logging records and stdout/stderr writes to a new buffer of
    ``AGENTOPS_ATTEMPT_LOG_BYTES`` while the block runs."""
    install()
    buffer = AttemptLogBuffer(settings.AGENTOPS_ATTEMPT_LOG_BYTES)
    token = _current.set(buffer)
    try:
        yield buffer
    finally:
        _current.reset(token)


def write_exception(buffer: AttemptLogBuffer, exc: BaseException) -> None:
    """Append ``exc``'s traceback to the attempt's log."""
    buffer.write("".join(traceback.format_exception(exc)))


def store(run_id: Any, step_id: int, attempt: int, buffer: AttemptLogBuffer) -> None:
    """Store ``buffer`` as the log of ``attempt`` of ``step_id`` (replacing one stored
    before for the same attempt); an attempt that wrote nothing stores no row. Best
    effort: a database error is logged, never raised, since the attempt's outcome is
    already recorded."""
    from runs.models import AttemptLog

    if buffer.total_bytes == 0:
        return  # nothing written: no row, and no statement on the hot path
    log = AttemptLog(
        run_id=run_id,
        step_id=step_id,
        attempt=attempt,
        text=values.storable_text(buffer.text()),
        truncated=buffer.truncated,
        total_bytes=buffer.total_bytes,
    )
    try:
        # One statement: insert, or replace the log stored before for this attempt.
        AttemptLog.objects.bulk_create(
            [log],
            update_conflicts=True,
            unique_fields=["step", "attempt"],
            update_fields=["text", "truncated", "total_bytes"],
        )
    except DatabaseError as exc:
        logger.warning("step %s attempt %s: storing its log failed: %s", step_id, attempt, exc)
