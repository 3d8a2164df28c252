"""Arranging rows in a given state for a test, bypassing the gateway's moves.

The models' state columns refuse ``update()`` outside the gateway
(``runs.state_fields``); a test that needs, say, a RUNNING run to start from writes it
with ``arrange`` and then exercises the real move.
"""

from typing import Any

from django.db.models import QuerySet

from runs.state_fields import write_state


def arrange(queryset: QuerySet, **fields: Any) -> int:
    """Write ``fields`` (state columns allowed) to every row of ``queryset``; returns
    the row count. Tests only."""
    return write_state(queryset, **fields)
