"""The side-effects part of the ``runs resume --from`` and ``runs replay`` previews."""

import json
from typing import Any


def write_side_effects(out, reused: list[dict[str, Any]], may_repeat: list[dict[str, Any]]) -> None:
    """Write the side effects recorded after a checkpoint to ``out`` (a command's
    ``stdout``), as both previews print them: those whose recorded result is reused
    (each with that result as JSON), then those that may happen again (each with its
    kind and recorded state), a heading line each, ``none`` for an empty list.

    ``reused`` and ``may_repeat`` are ``runs.engine.control.reuse.describe`` rows
    (``step``, ``tool``, ``side_effect``, ``status``, and ``result`` in ``reused``).
    Raises nothing of its own.
    """
    if reused:
        out.write("side effects reused (recorded results, not called again):")
        for op in reused:
            out.write(f"  {op['step']}: {op['tool']} -> {json.dumps(op['result'], default=str)}")
    else:
        out.write("side effects reused: none")
    if may_repeat:
        # A resume's new generation and a replay's new run both call with new keys.
        out.write("side effects that may repeat (new idempotency keys):")
        for op in may_repeat:
            out.write(f"  {op['step']}: {op['tool']} ({op['side_effect']}, was {op['status']})")
    else:
        out.write("side effects that may repeat: none")
