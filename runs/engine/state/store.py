"""The store of the current database: the one place that picks the backend.

Callers take ``store()`` and never ask which backend they have; the moves and what they
take and return are in ``store_interface``.
"""

from functools import cache

from django.db import connection

from runs.engine.state.store_interface import Store
from runs.engine.state.store_orm import OrmStore
from runs.engine.state.store_postgres import PostgresStore


def store() -> Store:
    """The store of the default connection's database: ``PostgresStore`` on PostgreSQL,
    ``OrmStore`` on SQLite (and any other vendor)."""
    return _for_vendor(connection.vendor)


@cache
def _for_vendor(vendor: str) -> Store:
    return PostgresStore() if vendor == "postgresql" else OrmStore()
