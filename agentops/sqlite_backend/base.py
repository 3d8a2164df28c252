"""Django's SQLite backend, with the threads of one process queued for the write lock.

SQLite has one writer. A transaction that finds the write lock taken waits in SQLite's
busy handler, which polls it with sleeps growing to 100 ms: with many execution slots
in one worker, the lock would stand free for most of those sleeps while every slot
waits, and throughput fell to a third of the ideal. Here the threads of one process
take a process-wide lock per database file first (handed over at once when the holder
commits or rolls back), so at most one of them at a time waits in SQLite's handler, for
other processes only.

The lock is a queue in front of SQLite's own write lock, never a replacement: a thread
that cannot get it within the busy timeout goes on to SQLite, which then decides as it
always did. Reads (WAL) never take it.
"""

import logging
import threading

from django.db.backends.sqlite3 import base

logger = logging.getLogger("agentops.db")

_locks_guard = threading.Lock()
_locks: dict[str, threading.Lock] = {}

#: The first word of statements that never write (in autocommit they take no lock).
_READS = ("SELECT", "PRAGMA", "EXPLAIN")


def writer_lock(name: str) -> threading.Lock:
    """The process-wide write queue of the database file ``name``."""
    with _locks_guard:
        return _locks.setdefault(name, threading.Lock())


def _writes(sql: str) -> bool:
    return not sql.lstrip()[:7].upper().startswith(_READS)


class DatabaseWrapper(base.DatabaseWrapper):
    """``django.db.backends.sqlite3`` whose write transactions (``BEGIN``, and each
    writing statement in autocommit) first take ``writer_lock`` of the database file,
    waiting at most the connection's busy timeout (``OPTIONS["timeout"]``, seconds)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._writer = writer_lock(str(self.settings_dict["NAME"]))
        self._holds_writer = False

    def take_writer(self) -> bool:
        """Take the write queue's lock for this connection; True when this call took
        it (False: already held, or not got within the busy timeout)."""
        if self._holds_writer:
            return False
        timeout = float(self.settings_dict.get("OPTIONS", {}).get("timeout", 5))
        if not self._writer.acquire(timeout=timeout):
            logger.warning("SQLite write queue busy for %ss; asking SQLite directly", timeout)
            return False
        self._holds_writer = True
        return True

    def give_writer(self) -> None:
        """Hand the write queue's lock on, if this connection holds it."""
        if self._holds_writer:
            self._holds_writer = False
            self._writer.release()

    # The stubs leave out the private methods every transaction and close go through.
    def _start_transaction_under_autocommit(self):
        took = self.take_writer()
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
        except BaseException:
            if took:
                self.give_writer()
            raise

    def _commit(self):
        try:
            return super()._commit()  # type: ignore[misc]
        finally:
            self.give_writer()

    def _rollback(self):
        try:
            return super()._rollback()  # type: ignore[misc]
        finally:
            self.give_writer()

    def _close(self):
        try:
            return super()._close()  # type: ignore[misc]
        finally:
            self.give_writer()

    def create_cursor(self, name=None):
        cursor = self.connection.cursor(factory=QueuedCursor)
        cursor.wrapper = self
        return cursor


class QueuedCursor(base.SQLiteCursorWrapper):
    """A cursor whose writing statements outside a transaction (each one its own
    transaction in autocommit) queue for the write lock like a ``BEGIN`` does."""

    wrapper: DatabaseWrapper

    def execute(self, query, params=None):
        if self.connection.in_transaction or not _writes(query):
            return super().execute(query, params)
        took = self.wrapper.take_writer()
        try:
            return super().execute(query, params)
        finally:
            if took:
                self.wrapper.give_writer()

    def executemany(self, query, param_list):
        if self.connection.in_transaction or not _writes(query):
            return super().executemany(query, param_list)
        took = self.wrapper.take_writer()
        try:
            return super().executemany(query, param_list)
        finally:
            if took:
                self.wrapper.give_writer()
