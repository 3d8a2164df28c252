"""A JSON column whose large strings live once per run in ``runs.Payload``.

Writers replace every string longer than ``INLINE_LIMIT`` bytes with a reference
``{"$payload": "<sha256 hex>", "bytes": <utf-8 length>}`` (``runs.engine.data.payloads.
externalize``), so the same tool output kept by the ledger, the step and its checkpoint
is stored once. ``PayloadJSONField`` turns references back into the strings when a row
is read, so every reader sees the value as written. A value written without
externalizing is simply stored inline.

A dict written by a client that happens to use the reserved keys is kept as
``{"$literal": {...}}`` and unwrapped on read, so no value is ever misread.
"""

import re
from typing import Any

from django.apps import apps

from runs.checked_fields import CheckedJSONField

#: Strings up to this many UTF-8 bytes stay inline.
INLINE_LIMIT = 2048
REF_KEY = "$payload"
LITERAL_KEY = "$literal"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def is_ref(value: Any) -> bool:
    """True for a payload reference ``{"$payload": digest, "bytes": n}``."""
    return (
        isinstance(value, dict)
        and value.keys() == {REF_KEY, "bytes"}
        and isinstance(value[REF_KEY], str)
        and bool(_DIGEST.match(value[REF_KEY]))
    )


def referenced_digests(value: Any, found: set[str] | None = None) -> set[str]:
    """Every payload digest referenced anywhere inside ``value``."""
    found = set() if found is None else found
    stack = [value]
    while stack:
        item = stack.pop()
        if is_ref(item):
            found.add(item[REF_KEY])
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def substitute(value: Any, texts: dict[str, str]) -> Any:
    """``value`` with references replaced by ``texts[digest]`` (a missing payload, e.g.
    pruned, becomes ``"[pruned payload <digest prefix>]"``) and literals unwrapped."""
    if is_ref(value):
        digest = value[REF_KEY]
        return texts.get(digest, f"[pruned payload {digest[:12]}, {value['bytes']} bytes]")
    if isinstance(value, dict):
        if value.keys() == {LITERAL_KEY} and isinstance(value[LITERAL_KEY], dict):
            return {k: substitute(v, texts) for k, v in value[LITERAL_KEY].items()}
        return {k: substitute(v, texts) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, texts) for v in value]
    return value


def resolve(value: Any) -> Any:
    """``value`` as written: references loaded from ``runs.Payload`` (one query)."""
    digests = referenced_digests(value)
    if not digests and not _has_literal(value):
        return value
    texts: dict[str, str] = {}
    if digests:
        payload = apps.get_model("runs", "Payload")
        texts = dict(payload.objects.filter(digest__in=digests).values_list("digest", "text"))
    return substitute(value, texts)


def _has_literal(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if LITERAL_KEY in item:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class PayloadJSONField(CheckedJSONField):
    """A ``CheckedJSONField`` that resolves payload references when a row is read."""

    def deconstruct(self):
        # Migrations name this class (unlike its parent, which passes for a JSONField).
        name, _, args, kwargs = super().deconstruct()
        return name, "runs.payload_field.PayloadJSONField", args, kwargs

    def from_db_value(self, value, expression, connection):
        return resolve(super().from_db_value(value, expression, connection))
