"""The PostgreSQL connection pool of a worker process with several execution slots.

A worker with one slot keeps one persistent connection per thread, as every other
process does. A worker with N slots would otherwise keep one per slot thread, most of
them idle while their step waits on a model or a tool; instead it switches the default
database to Django's own pool (``OPTIONS["pool"]``, psycopg's ``psycopg_pool``) of at
most ``AGENTOPS_WORKER_POOL_SIZE`` connections before any slot starts, and each thread
gives its connection back after each group of short transactions
(``release_connection``). The liveness lock keeps its own dedicated connection, so a
pooled worker uses at most pool size + 1 connections whatever N is.

The worker checks its idle pooled connections every few seconds (``replace_ended``):
one the server ended while it sat in the pool (``pg_terminate_backend``, a server
restart or failover) is replaced there, instead of failing the next transaction of
whichever slot, heartbeat or liveness check draws it (which would then reconnect and
retry). Checking at every checkout instead would cost a round trip each time a slot
borrows a connection.

A worker's sessions name it in ``pg_stat_activity`` (``application_name``), after the
``PGAPPNAME`` the process was given, so a tool that finds a process's sessions by that
name finds all of them.

Only worker processes are switched: web requests, commands and tests keep Django's
per-thread connections (a test's transaction must stay on one connection).
"""

import os

from django.db import connection, connections

#: PostgreSQL keeps the first 63 bytes of an ``application_name``.
APPLICATION_NAME_MAX = 63

_pooled = False


def application_name(role: str, worker_id: str, prefix: str | None = None) -> str:
    """The ``application_name`` of a worker's ``role`` sessions (``"worker"``: its pooled
    connections; ``"liveness"``: its liveness lock's): ``"agentops-<role> <worker id>"``,
    after ``prefix`` and a space when there is one (default: the ``PGAPPNAME`` of this
    process, which names every other session it opens), cut to 63 characters."""
    if prefix is None:
        prefix = os.environ.get("PGAPPNAME", "")
    name = f"agentops-{role} {worker_id}"
    return (f"{prefix} {name}" if prefix else name)[:APPLICATION_NAME_MAX]


def pooled() -> bool:
    """True once ``use_pool`` switched this process to the pool."""
    return _pooled


def use_pool(size: int, timeout: float, name: str) -> bool:
    """Switch this process's default database to a pool of at most ``size``
    connections, each shown as ``application_name`` ``name`` in ``pg_stat_activity``
    (see ``application_name()``); a thread asking for one when all are out waits up to
    ``timeout`` seconds, then gets an ``OperationalError``. Call before any thread but
    the caller's uses the database. Returns False (and changes nothing) when the
    database is not PostgreSQL. Raises ``ValueError`` for a size below 1."""
    global _pooled
    if size < 1:
        raise ValueError(f"a connection pool needs at least one connection, got {size}")
    default = connections["default"]
    if default.vendor != "postgresql":
        return False
    connections.close_all()
    # Every thread's connection wrapper reads this same dict when it connects.
    settings_dict = default.settings_dict
    settings_dict["CONN_MAX_AGE"] = 0
    settings_dict["OPTIONS"] = {
        **settings_dict.get("OPTIONS", {}),
        "application_name": name[:APPLICATION_NAME_MAX],
        "pool": {"min_size": 1, "max_size": size, "timeout": float(timeout)},
    }
    _pooled = True
    return True


def replace_ended() -> int:
    """Check every connection idle in this process's pool (one empty query each) and
    replace those the server has ended, so that no slot draws a dead one. Returns how
    many were replaced (0 when the process is not pooled). Database errors of the
    replacements stay inside the pool (it keeps trying in its own threads)."""
    if not _pooled:
        return 0
    # Only PostgreSQL's wrapper has a pool, and use_pool() switched it on.
    pool = connections["default"].pool  # type: ignore[attr-defined]
    lost = pool.get_stats().get("connections_lost", 0)
    pool.check()
    return pool.get_stats().get("connections_lost", 0) - lost


def release_connection(*, force: bool = False) -> None:
    """Give this thread's database connection back to the pool (when pooled) or close
    it (``force``), unless a transaction is open on it. Cheap when it holds none."""
    if not (_pooled or force) or connection.connection is None or connection.in_atomic_block:
        return
    connection.close()
