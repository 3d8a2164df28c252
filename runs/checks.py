"""System checks for durability settings (docs/data-safety.md, "Production").

Tagged ``database``: Django runs them when a command asks for database checks
(``manage.py check --database default``, and ``migrate``), not on every command.
"""

from django.core.checks import Tags, Warning, register
from django.db import connections


def _setting(connection, sql: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        row = cursor.fetchone()
    return str(row[0]).lower() if row else None


@register(Tags.database)
def check_durability(app_configs=None, databases=None, **kwargs):
    """Warn when the database may acknowledge a commit it can still lose:
    PostgreSQL ``synchronous_commit`` off (W001) or SQLite ``synchronous=OFF`` (W002)."""
    warnings = []
    for alias in databases or []:
        connection = connections[alias]
        if connection.vendor == "postgresql":
            value = _setting(connection, "SHOW synchronous_commit")
            if value == "off":
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
    return warnings
