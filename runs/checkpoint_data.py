"""The stored shape of checkpoint state: a whole state, or what changed since a base
checkpoint (``runs.models.Checkpoint``), and rebuilding the whole state from a chain.

Kept apart from the engine so the model can rebuild its ``state`` without importing
engine code.
"""

import json
from typing import Any

from django.db import connection

from runs.payload_field import resolve

#: ``Checkpoint.version`` of a whole state and of a delta on ``base``.
WHOLE, DELTA = 1, 2
_GROWING = ("outputs", "completed")


def delta(previous: dict[str, Any], state: dict[str, Any]) -> dict[str, Any] | None:
    """What turns ``previous`` into ``state`` (the ``version`` 2 shape of
    ``Checkpoint.data``), or ``None`` when ``state`` does not extend ``previous`` (its
    ``completed`` list is not a continuation) and must be stored whole."""
    done_before = previous.get("completed", [])
    done = state.get("completed", [])
    if done[: len(done_before)] != done_before:
        return None
    outputs_before = previous.get("outputs", {})
    changed = {
        k: v
        for k, v in state.items()
        if k not in _GROWING and (k not in previous or previous[k] != v)
    }
    if "phase" in state:
        # Always present, so a query can read a checkpoint's next step from its row.
        changed["phase"] = state["phase"]
    return {
        "set": changed,
        "unset": [k for k in previous if k not in state and k not in _GROWING],
        "outputs": {
            k: v
            for k, v in state.get("outputs", {}).items()
            if k not in outputs_before or outputs_before[k] != v
        },
        "completed": done[len(done_before) :],
    }


def apply(state: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """``state`` with the delta ``change`` applied (``state`` itself is not changed)."""
    result = {k: v for k, v in state.items() if k not in change.get("unset", [])}
    result.update(change.get("set", {}))
    result["outputs"] = {**state.get("outputs", {}), **change.get("outputs", {})}
    result["completed"] = [*state.get("completed", []), *change.get("completed", [])]
    return result


def materialize(checkpoint) -> dict[str, Any]:
    """The whole state at ``checkpoint``: its data when whole, else its base chain's
    whole state with every delta applied, oldest first (one query)."""
    if checkpoint.base_id is None:
        return checkpoint.data
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE chain(id, base_id, version, state, depth) AS ("
            " SELECT id, base_id, version, state, 0 FROM runs_checkpoint WHERE id = %s"
            " UNION ALL"
            " SELECT c.id, c.base_id, c.version, c.state, chain.depth + 1"
            " FROM runs_checkpoint c JOIN chain ON c.id = chain.base_id"
            ") SELECT version, state FROM chain ORDER BY depth DESC",
            [checkpoint.base_id],
        )
        rows = cursor.fetchall()
    state: dict[str, Any] = {}
    for version, data in rows:
        data = json.loads(data) if isinstance(data, str | bytes) else data
        state = dict(data) if version != DELTA else apply(state, data)
    # The rows were read raw: load their payload references (one query).
    return resolve(apply(state, checkpoint.data))
