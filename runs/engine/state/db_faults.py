"""Which database errors are faults of the infrastructure rather than of a step.

Two kinds matter to callers: the database was *busy* (a lock wait or statement ran past
``lock_timeout`` / ``statement_timeout``, a deadlock or serialization victim, or SQLite's
busy timeout ran out) and the database was *lost*: the connection is gone (server
restart, ``pg_terminate_backend``, network, an idle session ended by the server) or the
server cannot take this work now (read-only during a failover, starting up or shutting
down, out of connections, disk full, out of memory, an I/O error). Either means "back
off, reconnect and try the transaction again", never "the step failed": the fence makes
a retried commit safe, and a request that gives up answers 503 instead of a server
error.
"""

import sqlite3
import sys

from django.db import DatabaseError, InterfaceError, OperationalError

BUSY = "busy"
LOST = "lost"

#: SQLSTATEs of a lock wait or statement that hit its limit, or a deadlock victim.
_BUSY_SQLSTATES = {"55P03", "57014", "40P01", "40001"}
#: SQLSTATEs of a server that ended the session or cannot serve it now: admin shutdown,
#: crash shutdown, cannot connect now (starting, stopping), idle session timeouts, the
#: connection exceptions (08...), a transaction whose commit is unknown, read-only (a
#: failover's standby), too many connections, and insufficient resources or I/O errors
#: (disk full, out of memory).
_LOST_SQLSTATES = {
    "57P01",
    "57P02",
    "57P03",
    "57P05",
    "25P03",
    "08000",
    "08001",
    "08003",
    "08004",
    "08006",
    "08007",
    "40003",
    "25006",
    "53000",
    "53100",
    "53200",
    "53300",
    "58000",
    "58030",
}
#: SQLite's words for a database file it cannot write now: read-only (a remounted disk),
#: full, or failing I/O.
_SQLITE_LOST = ("readonly database", "disk i/o error", "disk is full", "unable to open")


def classify(exc: BaseException) -> str | None:
    """``BUSY``, ``LOST`` or ``None`` (not an infrastructure fault) for ``exc``.

    Looks through Django's wrapper at the driver's exception (``__cause__``).
    """
    # psycopg is not imported here: a process on SQLite never loads it (a twentieth of a
    # command's start-up), and an error cannot come from a driver that was never loaded.
    psycopg = sys.modules.get("psycopg")
    pg_errors = (psycopg.Error,) if psycopg else ()
    # Django's InterfaceError ("connection already closed") is a sibling of
    # DatabaseError, not a subclass.
    if not isinstance(exc, (DatabaseError, InterfaceError, sqlite3.Error, *pg_errors)):
        return None
    cause = (
        exc.__cause__ if isinstance(exc, DatabaseError | InterfaceError) and exc.__cause__ else exc
    )
    if psycopg and isinstance(cause, psycopg.Error):
        sqlstate = getattr(cause, "sqlstate", None)
        if sqlstate in _BUSY_SQLSTATES:
            return BUSY
        if sqlstate in _LOST_SQLSTATES:
            return LOST
        # No SQLSTATE: a broken socket or a failed connect, the server never answered.
        if sqlstate is None and isinstance(
            cause, psycopg.OperationalError | psycopg.InterfaceError
        ):
            return LOST
        return None
    if isinstance(cause, sqlite3.OperationalError):
        text = str(cause).lower()
        if "locked" in text or "busy" in text:
            return BUSY
        return LOST if any(words in text for words in _SQLITE_LOST) else None
    if isinstance(exc, InterfaceError):
        return LOST  # Django's "connection already closed"
    if isinstance(exc, OperationalError) and "closed" in str(exc).lower():
        return LOST
    return None
