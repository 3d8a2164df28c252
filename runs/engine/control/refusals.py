"""What every operator action shares: its reason (required, bounded) and the bounds of
its texts. Kept below the verbs, so that lifecycle, cancel, rewind, budget and the rest
refuse the same way without importing each other."""

from typing import Any

from runs.engine.errors import ControlError
from runs.engine.rules import MAX_CHARS, check_length

#: The operator actions whose event records a reason (the audit log's "why"); each
#: refuses a blank one the same way on every channel (API, CLI, console, admin).
REASONED_ACTIONS = ("cancel", "pause", "resume", "retry", "budget", "replay", "resolve")


#: The longest reason an operator action takes, in characters, on every channel (the
#: API's schemas, the console's forms and the CLI all end here or use this).
MAX_REASON_CHARS = MAX_CHARS["reason"]
#: The longest evidence an operator gives for a resolution, in characters.
MAX_EVIDENCE_CHARS = MAX_CHARS["evidence"]


def require_reason(reason: Any, action: str) -> str:
    """``reason`` stripped, for ``action`` (one of ``REASONED_ACTIONS``). Raises
    ``ControlError("reason_required")`` naming the ``reason`` field when it is missing
    (``None``) or blank, ``ControlError("invalid_input")`` when it is not text (a JSON
    number, object...) or longer than ``MAX_REASON_CHARS`` (refused whole, never cut)."""
    if reason is None or (isinstance(reason, str) and not reason.strip()):
        raise ControlError(
            "reason_required", f"{action} needs a reason (recorded in the audit log)",
            {"reason": "required"},
        )  # fmt: skip
    check_length(reason, "reason", MAX_REASON_CHARS)
    return reason.strip()
