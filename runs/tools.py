"""Tools: the outside actions steps may take, each declared with its side-effect class.

- ``read``: safe to repeat (a thermostat reading).
- ``idempotent``: the outside system accepts an idempotency key; a retry reuses the key.
- ``unsafe``: no key; a ``verify`` hook must say what happened before any retry.

Every call goes through the operation ledger (``runs.engine.effects.ledger``). Tools register
themselves by name when created, so the engine can find a tool's ``verify`` hook from an
``Operation`` row (``get_tool``).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runs.engine.durations import duration_problem

SIDE_EFFECTS = ("read", "idempotent", "unsafe")

#: Answers a ``verify`` hook may give.
VERIFY_STATUSES = ("done", "not_done", "cannot_tell")

_tools: dict[str, "Tool"] = {}


@dataclass(frozen=True)
class ToolCall:
    """What a tool implementation receives besides its arguments: the run's id, the
    call's idempotency key and the attempt (fencing token) it runs in."""

    run_id: str
    idempotency_key: str
    attempt: int


@dataclass(frozen=True)
class VerifyAnswer:
    """What a ``verify`` hook found out about an earlier call.

    ``status``: ``"done"`` (the effect happened; ``result`` is what the call would have
    returned), ``"not_done"`` (it did not happen; calling again is safe) or
    ``"cannot_tell"``. ``evidence``: a human-readable account of what was checked.
    """

    status: str
    result: Any = None
    evidence: str = ""

    def __post_init__(self) -> None:
        if self.status not in VERIFY_STATUSES:
            raise ValueError(f"verify status must be one of {VERIFY_STATUSES}, not {self.status!r}")


@dataclass(frozen=True)
class Tool:
    """A named tool. ``fn(arguments, call) -> result`` (JSON-serializable).

    ``verify(arguments, call) -> VerifyAnswer`` asks the outside world whether an earlier
    call with this key took effect (required for ``unsafe`` tools to be retried safely;
    without it an interrupted unsafe call always goes to a human). ``timeout``: seconds a
    call may take before it counts as TIMEOUT (``None``: the step's ``timeout``).
    """

    name: str
    fn: Callable[[dict, ToolCall], Any]
    side_effect: str = "read"
    verify: Callable[[dict, ToolCall], VerifyAnswer] | None = None
    timeout: float | None = None

    def __post_init__(self) -> None:
        if self.side_effect not in SIDE_EFFECTS:
            raise ValueError(f"tool {self.name}: side_effect must be one of {SIDE_EFFECTS}")
        if self.timeout is not None and (reason := duration_problem(self.timeout)):
            raise ValueError(f"tool {self.name}: timeout {reason}")
        _tools[self.name] = self


def get_tool(name: str) -> Tool | None:
    """The tool registered under ``name`` (the last one created wins), or ``None``."""
    return _tools.get(name)
