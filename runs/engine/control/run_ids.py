"""Naming a run by its id: whole, or by a unique prefix of it with at least
``MIN_HEX_DIGITS`` hex digits (the console shows 8 characters, ``runs list`` and the
logs the whole id). The one rule every command that takes a run id and the console's
search follow."""

import re
import uuid

from django.db import connection
from django.db.models import Q

from runs.engine.errors import ControlError
from runs.models import Run

#: Fewest hex digits a prefix needs (hyphens do not count: ``----`` names nothing).
MIN_HEX_DIGITS = 4
#: What can be a run id or a prefix of one: hex digits and hyphens.
ID_PREFIX = re.compile(r"^[0-9a-f-]{1,36}$")
#: Candidates named when a prefix matches several runs.
CANDIDATES_SHOWN = 10


def is_id_prefix(value: str) -> bool:
    """True when ``value`` (any case, surrounding blanks ignored) can name a run: hex
    digits and hyphens, at most 36 characters, with at least ``MIN_HEX_DIGITS`` hex
    digits."""
    value = value.strip().lower()
    return bool(ID_PREFIX.match(value)) and len(value.replace("-", "")) >= MIN_HEX_DIGITS


def id_prefix_q(field: str, value: str) -> Q:
    """A ``Q`` matching ``field`` (a run id column, e.g. ``"id"`` or ``"run__id"``)
    against ``value``: the whole id (exact), or a prefix of its canonical text.

    PostgreSQL stores UUIDs natively and compares prefixes against the hyphenated text;
    SQLite stores 32 hex digits without hyphens, so hyphens are dropped there.
    """
    value = value.strip().lower()
    try:
        return Q(**{field: uuid.UUID(value)})
    except ValueError:
        pass
    if not connection.features.has_native_uuid_field:
        value = value.replace("-", "")
    return Q(**{f"{field}__istartswith": value})


def find_run(text: str) -> Run:
    """The run whose id is ``text`` or starts with it (at least ``MIN_HEX_DIGITS`` hex
    digits).

    Raises ``ControlError`` ``unknown_run`` when none matches or ``text`` cannot be an
    id (the message says a prefix needs at least 4 hex digits), and ``ambiguous_run``
    naming the candidates (newest first, at most ``CANDIDATES_SHOWN``) when a prefix
    matches more than one run.
    """
    value = str(text).strip().lower()
    if not is_id_prefix(value):
        raise ControlError(
            "unknown_run",
            f"no run {text!r}: a run id or a prefix of one has at least {MIN_HEX_DIGITS} "
            "hex digits (0-9, a-f)",
        )
    matches = list(
        Run.objects.filter(id_prefix_q("pk", value))
        .order_by("-created_at", "-pk")
        .values_list("pk", "workflow", "status")[: CANDIDATES_SHOWN + 1]
    )
    if not matches:
        raise ControlError("unknown_run", f"no run {text!r}")
    if len(matches) > 1:
        named = ", ".join(
            f"{pk} ({workflow} {status})" for pk, workflow, status in matches[:CANDIDATES_SHOWN]
        )
        more = " and more" if len(matches) > CANDIDATES_SHOWN else ""
        raise ControlError(
            "ambiguous_run",
            f"run id prefix {text!r} matches several runs: {named}{more}; give more of the id",
        )
    return Run.objects.get(pk=matches[0][0])
