"""The database clock: leases, deadlines and stuck detection use
the database's time, never a worker's, so worker clocks need no synchronisation."""

from datetime import datetime, timedelta

from django.db import connection
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now
from django.utils.dateparse import parse_datetime
from django.utils.timezone import is_naive, make_aware


def now_sql() -> str:
    """SQL for the current database time, the same expression Django's ``Now()`` emits."""
    if connection.vendor == "postgresql":
        return "STATEMENT_TIMESTAMP()"
    return "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"


def now_plus_sql() -> str:
    """SQL for database time plus a number of seconds given as the next ``%s`` parameter;
    pass the parameter through ``seconds_param``."""
    if connection.vendor == "postgresql":
        return "(STATEMENT_TIMESTAMP() + make_interval(secs => %s))"
    return "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'now', %s)"


def seconds_param(seconds: float):
    """The parameter that ``now_plus_sql`` expects for ``seconds`` on this database."""
    if connection.vendor == "postgresql":
        return float(seconds)
    return f"{float(seconds):+.3f} seconds"


def db_now() -> datetime:
    """The database's current time as an aware UTC datetime (one round trip)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {now_sql()}", [])
        value = cursor.fetchone()[0]
    if isinstance(value, str):
        value = parse_datetime(value)
    return make_aware(value) if is_naive(value) else value


def deadline_in(seconds: float | None) -> ExpressionWrapper | None:
    """The database time ``seconds`` from now, as an expression to write into a column
    (a wait's ``wait_until``, an approval's ``expires_at``); ``None`` (no deadline) for
    ``None`` or 0 seconds."""
    if not seconds:
        return None
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())
