"""System checks for durability settings (docs/data-safety.md, "Production").

Two checks, registered by ``runs.apps``. ``check_durability`` is tagged ``database``:
Django runs it when a command asks for database checks (``manage.py check --database
default``, and ``migrate``), not on every command; it looks at what the connection itself does
(PostgreSQL ``synchronous_commit``, SQLite ``synchronous`` and journal mode).
``check_stores`` is a deployment check (``manage.py check --deploy``): the same, plus
what the servers are configured to do with the product's data (PostgreSQL ``fsync``
and ``full_page_writes``, Redis ``maxmemory-policy``). A worker also logs the Redis
warning when it starts (``redis_eviction_problem``).

Redis persistence (RDB, AOF) is not checked: the queue only notifies, and a Redis
restarted empty loses no outcome (the sweeper re-notifies); eviction is checked because
it drops keys from under RQ while Redis keeps running, silently.
"""

from django.conf import settings
from django.core.checks import Warning
from django.db import DatabaseError, connections

#: The one Redis eviction policy that never drops a key (a full Redis refuses writes).
NO_EVICTION = "noeviction"


def _setting(connection, sql: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        row = cursor.fetchone()
    return str(row[0]).lower() if row else None


def _connection_warnings(alias: str) -> list[Warning]:
    """What ``alias``'s connection does that can lose acknowledged commits (W001, W002,
    W006)."""
    warnings = []
    connection = connections[alias]
    if connection.vendor == "postgresql":
        if _setting(connection, "SHOW synchronous_commit") == "off":
            warnings.append(
                Warning(
                    f"database {alias!r} runs with synchronous_commit=off",
                    hint="A crash of the PostgreSQL server can lose the last commits the "
                    "engine was told were durable (step results, leases, events); a "
                    "side effect may then run twice. Set synchronous_commit=on for "
                    "the AgentOps database (see docs/data-safety.md).",
                    id="agentops.W001",
                )
            )
    elif connection.vendor == "sqlite":
        if _setting(connection, "PRAGMA synchronous") == "0":
            warnings.append(
                Warning(
                    f"database {alias!r} runs with PRAGMA synchronous=OFF",
                    hint="An OS crash or power loss can corrupt or lose committed "
                    "transactions; use NORMAL (with WAL) or FULL.",
                    id="agentops.W002",
                )
            )
        mode = _setting(connection, "PRAGMA journal_mode")
        if mode != "wal":
            warnings.append(
                Warning(
                    f"database {alias!r} runs with PRAGMA journal_mode={mode} instead of WAL",
                    hint="With synchronous=NORMAL only WAL keeps committed transactions "
                    "safe from an OS crash or power loss (a rollback journal can corrupt "
                    "the file), and without WAL readers block the writer. Keep the "
                    "database on a local file system that supports WAL's shared memory "
                    "(not a network file system).",
                    id="agentops.W006",
                )
            )
    return warnings


def _server_warnings(alias: str) -> list[Warning]:
    """What the PostgreSQL server of ``alias`` is configured to do that can lose or
    corrupt committed data (W004 ``fsync``, W005 ``full_page_writes``)."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return []
    warnings = []
    if _setting(connection, "SHOW fsync") == "off":
        warnings.append(
            Warning(
                f"the PostgreSQL server of database {alias!r} runs with fsync=off",
                hint="An OS crash or power loss can lose committed transactions and "
                "corrupt the whole cluster beyond repair (runs, leases, the operation "
                "ledger). Set fsync=on in postgresql.conf; it is only for throwaway data.",
                id="agentops.W004",
            )
        )
    if _setting(connection, "SHOW full_page_writes") == "off":
        warnings.append(
            Warning(
                f"the PostgreSQL server of database {alias!r} runs with full_page_writes=off",
                hint="A page half-written at an OS crash or power loss cannot be repaired "
                "from the WAL: the database can be corrupted. Set full_page_writes=on in "
                "postgresql.conf.",
                id="agentops.W005",
            )
        )
    return warnings


def redis_eviction_problem(url: str | None = None) -> tuple[str, str] | None:
    """``(what, fix)`` when the Redis at ``url`` (default ``REDIS_URL``) may evict keys
    (its ``maxmemory-policy`` is not ``noeviction``): RQ's queued jobs and registries
    would disappear while Redis keeps running. ``None`` when it does not, when no Redis
    is configured, or when it cannot be asked (``INFO`` answers even where ``CONFIG``
    is disabled, as on managed services)."""
    import redis

    url = url or settings.REDIS_URL
    if not url:
        return None
    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    try:
        policy = client.info("memory").get("maxmemory_policy")
    except redis.RedisError:
        return None
    finally:
        client.close()
    if not policy or policy == NO_EVICTION:
        return None
    return (
        f"Redis at REDIS_URL runs with maxmemory-policy {policy}: when full it evicts "
        "keys, and queued step notifications and RQ's job records vanish with them",
        f"set maxmemory-policy {NO_EVICTION} (CONFIG SET maxmemory-policy {NO_EVICTION}, "
        "and in redis.conf; deploy/redis/agentops.conf has it): a full Redis then "
        "refuses writes, which the engine notices and works around",
    )


def check_durability(app_configs=None, databases=None, **kwargs):
    """Warn when the database connection may acknowledge a commit it can still lose:
    PostgreSQL ``synchronous_commit`` off (W001), SQLite ``synchronous=OFF`` (W002) or
    a journal mode other than WAL (W006)."""
    warnings = []
    for alias in databases or []:
        warnings += _connection_warnings(alias)
    return warnings


def check_stores(app_configs=None, databases=None, **kwargs):
    """``check --deploy``: Redis that may evict keys (W003), a PostgreSQL server that
    may lose or corrupt committed data (W004 ``fsync``, W005 ``full_page_writes``), and
    what ``check_durability`` checks when ``--database`` did not already ask for it.
    A database that cannot be reached is reported once (W007) instead."""
    warnings = []
    problem = redis_eviction_problem()
    if problem is not None:
        warnings.append(Warning(problem[0], hint=problem[1].capitalize() + ".", id="agentops.W003"))
    for alias in connections:
        try:
            warnings += _server_warnings(alias)
            if not databases:
                warnings += _connection_warnings(alias)
        except DatabaseError as exc:
            warnings.append(
                Warning(
                    f"database {alias!r} could not be checked: {str(exc).strip()[:200]}",
                    id="agentops.W007",
                )
            )
    return warnings
