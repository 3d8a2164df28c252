"""Tools: the outside actions steps may take, each declared with its side-effect class.

- ``read``: safe to repeat (a thermostat reading).
- ``idempotent``: the outside system accepts an idempotency key; a retry reuses the key.
- ``unsafe``: no key; a ``verify`` hook must say what happened before any retry.

Every call goes through the operation ledger (``runs.engine.ledger``).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SIDE_EFFECTS = ("read", "idempotent", "unsafe")


@dataclass(frozen=True)
class ToolCall:
    """What a tool implementation receives besides its arguments."""

    run_id: str
    idempotency_key: str
    attempt: int


@dataclass(frozen=True)
class Tool:
    """A named tool. ``fn(arguments, call) -> result`` (JSON-serializable).

    ``verify(arguments, call) -> VerifyAnswer`` asks the outside world whether an earlier
    call with this key took effect (required for ``unsafe`` tools to be retried safely).
    """

    name: str
    fn: Callable[[dict, ToolCall], Any]
    side_effect: str = "read"
    verify: Callable[[dict, ToolCall], Any] | None = None

    def __post_init__(self) -> None:
        if self.side_effect not in SIDE_EFFECTS:
            raise ValueError(f"tool {self.name}: side_effect must be one of {SIDE_EFFECTS}")
