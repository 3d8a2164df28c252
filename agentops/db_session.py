"""Bounds on PostgreSQL waits, per kind of process.

Every new PostgreSQL connection gets ``lock_timeout`` and ``statement_timeout`` from
``AGENTOPS_DB_TIMEOUTS[kind]`` (seconds; 0 = no limit). Web requests give up early (the
client gets a 503 with ``Retry-After`` and can retry), workers wait longer and retry
their transaction, command-line tools (``migrate``, ``backup``) run statements of any
length. The web entry points and the worker/sweeper commands name their kind with
``use_process_kind``; anything else is ``cli``. SQLite has its own busy timeout
(settings ``SQLITE_OPTIONS``).
"""

from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created

KINDS = ("web", "worker", "cli")

_kind = "cli"


def process_kind() -> str:
    """The kind this process declared (``web``, ``worker`` or ``cli``)."""
    return _kind


def use_process_kind(kind: str) -> None:
    """Declare this process's kind; applies its limits to open connections at once and
    to every later one. Raises ``ValueError`` for an unknown kind."""
    global _kind
    if kind not in KINDS:
        raise ValueError(f"unknown process kind {kind!r}; expected one of {KINDS}")
    _kind = kind
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None:
            apply_limits(conn)


def limits(kind: str | None = None) -> tuple[float, float]:
    """``(lock_timeout, statement_timeout)`` in seconds for ``kind`` (default: this
    process's); 0 means no limit."""
    return settings.AGENTOPS_DB_TIMEOUTS[kind or _kind]


def apply_limits(conn) -> None:
    """Set this process's limits on the PostgreSQL connection ``conn`` (one round trip);
    other databases are left alone."""
    if conn.vendor != "postgresql":
        return
    lock, statement = limits()
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('lock_timeout', %s, false), "
            "set_config('statement_timeout', %s, false)",
            [f"{int(lock * 1000)}ms", f"{int(statement * 1000)}ms"],
        )


def install() -> None:
    """Apply this process's limits to every new PostgreSQL connection from now on (a
    ``connection_created`` receiver; installing twice keeps one)."""
    connection_created.connect(_on_connection_created, dispatch_uid="agentops.db_session.limits")


def _on_connection_created(sender, connection, **kwargs) -> None:
    # A pooled connection is "created" again at every checkout: set the limits once per
    # server session (and again only when the process changed its kind).
    if connection.vendor != "postgresql":
        return
    raw = connection.connection
    if getattr(raw, "_agentops_limits_kind", None) == _kind:
        return
    apply_limits(connection)
    raw._agentops_limits_kind = _kind
