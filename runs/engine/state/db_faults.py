"""Which database errors are faults of the infrastructure rather than of a step.

Two kinds matter to callers: the database was *busy* (a lock wait or statement ran past
``lock_timeout`` / ``statement_timeout``, or SQLite's busy timeout ran out) and the
connection was *lost* (server restart, ``pg_terminate_backend``, network). Either means
"try the transaction again", never "the step failed": the fence makes a retried commit
safe, and a request that gives up answers 503 instead of a server error.
"""

import sqlite3
import sys

from django.db import DatabaseError, InterfaceError, OperationalError

BUSY = "busy"
LOST = "lost"

#: SQLSTATEs of a lock wait or statement that hit its limit, or a deadlock victim.
_BUSY_SQLSTATES = {"55P03", "57014", "40P01", "40001"}
#: SQLSTATEs the server sends when it ends the session (admin shutdown, crash, restart).
_LOST_SQLSTATES = {"57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004"}


def classify(exc: BaseException) -> str | None:
    """``BUSY``, ``LOST`` or ``None`` (not an infrastructure fault) for ``exc``.

    Looks through Django's wrapper at the driver's exception (``__cause__``).
    """
    # psycopg is not imported here: a process on SQLite never loads it (a twentieth of a
    # command's start-up), and an error cannot come from a driver that was never loaded.
    psycopg = sys.modules.get("psycopg")
    pg_errors = (psycopg.Error,) if psycopg else ()
    if not isinstance(exc, (DatabaseError, sqlite3.Error, *pg_errors)):
        return None
    cause = exc.__cause__ if isinstance(exc, DatabaseError) and exc.__cause__ else exc
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
        return BUSY if "locked" in text or "busy" in text else None
    if isinstance(exc, InterfaceError):
        return LOST  # Django's "connection already closed"
    if isinstance(exc, OperationalError) and "closed" in str(exc).lower():
        return LOST
    return None
