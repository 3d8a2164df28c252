"""The hot path's statements as server-side prepared statements (PostgreSQL).

The claim and the commit of a step (``one_claim``, ``one_statement``) are one large
statement each, run thousands of times a minute by a busy worker with only the values
changing. Sent as text with the values inlined (Django's default, client-side binding),
PostgreSQL parses and plans each one afresh, which cost about as much server CPU as the
rest of the step. Here they are sent with server-side binding and prepared once per
database session, so the server reuses its plan.

Django keeps prepared statements off (``prepare_threshold`` ``None``) so that a
transaction-pooling proxy (PgBouncer in transaction mode) keeps working: behind one,
the next transaction may land on a server session that does not know the statement.
So a statement the server does not know (or knows twice) is run again once, unprepared,
and this connection prepares nothing more. The statements run in autocommit (each its
own transaction), so a failed try changed nothing.
"""

import logging
import sys
import weakref
from typing import Any

import psycopg
from django.db import ProgrammingError, connection
from django.db.backends.utils import CursorWrapper
from psycopg import errors

logger = logging.getLogger("agentops.prepared")

#: psycopg prepares a statement only when told to (``prepare=True``) on a connection
#: whose threshold is not ``None``; this threshold is never reached by counting, so
#: nothing else on the connection gets prepared.
_ONLY_WHEN_ASKED = sys.maxsize

#: Errors a pooling proxy gives for a prepared statement of another server session.
_POOLED = (errors.InvalidSqlStatementName, errors.DuplicatePreparedStatement)


class _PreparingCursor(psycopg.Cursor):
    """A server-binding cursor that asks psycopg to prepare each statement (``prepare``
    ``True``) or never to use a prepared one (``False``)."""

    prepare = True

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=self.prepare, binary=binary)


class _UnpreparedCursor(_PreparingCursor):
    prepare = False


#: Connections (psycopg) that refused a prepared statement: they prepare no more.
_refused: "weakref.WeakSet[Any]" = weakref.WeakSet()


def fetchone(sql: str, params: dict[str, Any]) -> tuple[tuple | None, list[str]]:
    """Run ``sql`` (``%(name)s`` placeholders, values bound by the server) on Django's
    default connection, which must be PostgreSQL in autocommit mode; returns its first
    row (``None`` when it returned none) and the names of its columns. The statement is
    prepared on first use in each database session. Database errors propagate as
    Django's."""
    connection.ensure_connection()
    pg = connection.connection
    if pg not in _refused:
        if pg.prepare_threshold is None:
            pg.prepare_threshold = _ONLY_WHEN_ASKED
        try:
            return _run(_PreparingCursor(pg), sql, params)
        except ProgrammingError as exc:
            if not isinstance(exc.__cause__, _POOLED):
                raise
            logger.warning(
                "prepared statements refused (%s); a pooling proxy? running unprepared", exc
            )
            _refused.add(pg)
    return _run(_UnpreparedCursor(pg), sql, params)


def _run(raw, sql: str, params: dict[str, Any]) -> tuple[tuple | None, list[str]]:
    # Through Django's cursor wrapper: its error translation, execute wrappers and
    # query logging apply as to any other statement.
    connection.validate_thread_sharing()
    cursor: CursorWrapper = (
        connection.make_debug_cursor(raw)
        if connection.queries_logged
        else connection.make_cursor(raw)
    )
    with cursor:
        cursor.execute(sql, params)
        return cursor.fetchone(), [c.name for c in cursor.description or ()]
