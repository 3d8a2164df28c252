"""Ids in URL paths, for the console and the API alike: one path converter per kind of
id (``runs.engine.rules.IDS``), registered under the kind's name (``<run:run_id>``,
``{approval:approval_id}`` in an API route).

An ill-formed id names nothing, so it is answered as an id that names no row: the
converter raises ``UnknownId`` (a 404 carrying the kind's code, ``unknown_run``) before
any view runs or anything is looked up. Django's own ``uuid`` and ``int`` converters
would not match instead, which is a 404 without a code on the console and a 422 on the
API.
"""

from typing import Any

from django.http import Http404
from django.urls import register_converter

from runs.engine.service import IDS, parse_id, unknown_id_message


class UnknownId(Http404):
    """No row of ``kind`` (a key of ``IDS``) is named by ``value``, ill-formed or not;
    ``code`` is the kind's (``unknown_run``). The console's 404 page and the API's
    404 body name it."""

    def __init__(self, kind: str, value: Any):
        super().__init__(unknown_id_message(value, kind))
        self.kind = kind
        self.code = IDS[kind].code


class _IdConverter:
    """A path segment taken whole (anything but ``/``) and parsed by ``parse_id``."""

    regex = "[^/]+"
    kind = ""

    def to_python(self, value: str):
        parsed = parse_id(value, self.kind)
        if parsed is None:
            raise UnknownId(self.kind, value)
        return parsed

    def to_url(self, value) -> str:
        return str(value)


def get_or_unknown(queryset, kind: str, **lookup):
    """The one row of ``queryset`` matching ``lookup``; raises ``UnknownId`` for ``kind``
    when there is none."""
    try:
        return queryset.get(**lookup)
    except queryset.model.DoesNotExist:
        raise UnknownId(kind, next(iter(lookup.values()), "")) from None


for _kind in IDS:
    register_converter(type(f"{_kind.title()}IdConverter", (_IdConverter,), {"kind": _kind}), _kind)
