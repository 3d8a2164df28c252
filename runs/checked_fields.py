"""Model fields that check every value they write (``runs.engine.state.values``).

Whatever path a value takes to the database (a model's ``save``, ``create``,
``bulk_create`` or a queryset's ``update``, from a worker, a request or a command), the
field prepares it first:

- ``CheckedJSONField``: ``values.storable`` escapes NUL in every string and key and
  raises ``InvalidValue`` (code ``INVALID_OUTPUT``, naming ``Model.field``, the path
  inside the value and its type) for anything that would not come back unchanged
  (NaN or infinity, a ``datetime``, a non-string key, ``bytes``, a ``set``...), before
  any SQL is sent, so the transaction rolls back cleanly on both backends;
- ``CheckedTextField`` / ``CheckedCharField``: NUL becomes ``values.NUL_ESCAPE`` (and a
  lone surrogate its ``\\udXXX`` escape), which PostgreSQL would refuse and SQLite would
  store, so both backends keep the same text. Lookups (exact, ``in``, the pattern
  lookups) are prepared the same way, so a filter on such text still finds it.

This is storage encoding, not input validation: outside input (run inputs, signal
payloads, thread ids...) is refused earlier by the input rules (``runs.engine.rules``),
so the sender reads back what it sent; these fields keep what the engine itself
writes (agent output, error text) storable. The checks happen in Python only: each
field reports itself as Django's own field in migrations (``deconstruct``), so the
columns and the migration history are unchanged.
Callers that know where a value came from check it earlier with a better name (the
executor fails the attempt; the API and console answer 4xx); these fields make sure
nothing reaches the database unchecked.
"""

from typing import Any

from django.db import models
from django.db.models import lookups

from runs.engine.state import values


def _is_plain(value: Any) -> bool:
    # Expressions (F, Now, Value...) are compiled by Django, not prepared here.
    return value is not None and not hasattr(value, "resolve_expression")


def _label(field: models.Field) -> str:
    model = getattr(field, "model", None)
    return f"{model.__name__}.{field.name}" if model is not None else str(field.name)


class CheckedJSONField(models.JSONField):
    """A ``JSONField`` whose written values pass ``values.storable``. Raises
    ``values.InvalidValue`` for a value that cannot round-trip."""

    def get_prep_value(self, value: Any) -> Any:
        if _is_plain(value):
            value = values.storable(value, _label(self))
        return super().get_prep_value(value)

    def deconstruct(self):
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


class CheckedTextField(models.TextField):
    """A ``TextField`` that stores NUL escaped (``values.storable_text``)."""

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return values.storable_text(value) if isinstance(value, str) else value

    def deconstruct(self):
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.TextField", args, kwargs


class CheckedCharField(models.CharField):
    """A ``CharField`` that stores NUL escaped (``values.storable_text``)."""

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return values.storable_text(value) if isinstance(value, str) else value

    def deconstruct(self):
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.CharField", args, kwargs


def _prepared(lookup: type[lookups.Lookup]) -> type[lookups.Lookup]:
    # Pattern lookups skip the field's get_prep_value; a search term with NUL must be
    # escaped like the stored text (and must not reach PostgreSQL raw).
    return type(lookup.__name__, (lookup,), {"prepare_rhs": True})


for _field in (CheckedTextField, CheckedCharField):
    for _lookup in (
        lookups.Contains,
        lookups.IContains,
        lookups.StartsWith,
        lookups.IStartsWith,
        lookups.EndsWith,
        lookups.IEndsWith,
        lookups.Regex,
        lookups.IRegex,
    ):
        _field.register_lookup(_prepared(_lookup))
