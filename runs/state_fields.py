"""Read-only state columns: the querysets of Run, Step, Operation, Approval and Takeover
refuse an ``update()`` or ``bulk_update()`` that names a state column (status, attempt,
version, generation, compensation status).

Those columns change only through the gateway's moves (``runs.engine.state.gateway``),
which write them with ``write_state``; anything else raises ``StateWriteRefused``, as
procrastinate's read-only Django models refuse writes to its job tables. Plain columns
(output, lease_until, notified_at, ...) stay writable by anyone.
"""

from collections.abc import Iterable
from typing import Any

from django.db import models

#: The columns that carry state, per model label.
STATE_FIELDS: dict[str, frozenset[str]] = {
    "runs.Run": frozenset({"status", "version", "generation", "compensation_status"}),
    "runs.Step": frozenset({"status", "attempt", "generation"}),
    "runs.Operation": frozenset({"status", "attempt"}),
    "runs.Approval": frozenset({"status"}),
    "runs.Takeover": frozenset({"status"}),
}


class StateWriteRefused(Exception):
    """An ``update()``/``bulk_update()`` outside the gateway named a state column.
    ``model`` is the model label, ``fields`` the refused column names."""

    def __init__(self, model: str, fields: Iterable[str]):
        self.model = model
        self.fields = sorted(fields)
        super().__init__(
            f"{model}.{', '.join(self.fields)} change only through a gateway move "
            "(runs.engine.state.gateway)"
        )


def _refuse(model: type[models.Model], names: Iterable[str]) -> None:
    guarded = STATE_FIELDS.get(model._meta.label, frozenset())
    hit = guarded.intersection(names)
    if hit:
        raise StateWriteRefused(model._meta.label, hit)


class StateGuardedQuerySet(models.QuerySet):
    """A queryset whose ``update`` and ``bulk_update`` refuse the model's state
    columns (``STATE_FIELDS``); raises ``StateWriteRefused``."""

    def update(self, **kwargs: Any) -> int:
        _refuse(self.model, kwargs)
        return super().update(**kwargs)

    def bulk_update(self, objs, fields, batch_size=None) -> int:
        _refuse(self.model, fields)
        return super().bulk_update(objs, fields, batch_size=batch_size)


def write_state(queryset: models.QuerySet, **fields: Any) -> int:
    """The gateway's own UPDATE (state columns allowed); returns the row count. Only
    ``runs.engine.state`` calls this; a test scans the source for other callers."""
    return models.QuerySet.update(queryset, **fields)
