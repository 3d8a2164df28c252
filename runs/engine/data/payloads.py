"""The payload store: each large string of a run stored once, referenced everywhere else.

A tool's output is kept by the ledger (``Operation.result``), by the step that returned
it (``Step.output``) and by the checkpoint after that step (``Checkpoint.state``).
Writers pass those values through ``externalize(run_id, value)`` first: every string
longer than ``runs.payload_field.INLINE_LIMIT`` bytes goes into ``Payload`` once per run
(keyed by its sha256) and the value keeps a small reference in its place; reading the
column gives the value back (``runs.payload_field.PayloadJSONField``).
"""

import hashlib
from typing import Any

from runs.models import Payload
from runs.payload_field import INLINE_LIMIT, LITERAL_KEY, REF_KEY


def externalize(run_id, value: Any) -> Any:
    """``value`` with every string over ``INLINE_LIMIT`` UTF-8 bytes replaced by a
    reference, those strings stored in ``Payload`` for ``run_id`` (inserted once; an
    existing copy is reused). Call it inside the transaction that writes the value, so
    a rollback removes both. Values without large strings come back unchanged."""
    found: dict[str, tuple[str, int]] = {}
    result = _walk(value, found)
    if found:
        Payload.objects.bulk_create(
            [
                Payload(run_id=run_id, digest=digest, text=text, size=size)
                for digest, (text, size) in found.items()
            ],
            ignore_conflicts=True,
        )
    return result


def _walk(value: Any, found: dict[str, tuple[str, int]]) -> Any:
    if isinstance(value, str):
        encoded = value.encode("utf-8", "surrogatepass")
        if len(encoded) <= INLINE_LIMIT:
            return value
        digest = hashlib.sha256(encoded).hexdigest()
        found[digest] = (value, len(encoded))
        return {REF_KEY: digest, "bytes": len(encoded)}
    if isinstance(value, dict):
        walked = {k: _walk(v, found) for k, v in value.items()}
        if REF_KEY in value or LITERAL_KEY in value:
            # A dict that looks like our markers (values come raw from tools and clients,
            # never already externalized): kept verbatim, unwrapped on read.
            return {LITERAL_KEY: walked}
        return walked
    if isinstance(value, list | tuple):
        return [_walk(v, found) for v in value]
    return value


def stored_bytes(run_ids=None) -> int:
    """Bytes of payload text stored (for ``run_ids`` if given)."""
    rows = Payload.objects.all() if run_ids is None else Payload.objects.filter(run_id__in=run_ids)
    return sum(rows.values_list("size", flat=True))
