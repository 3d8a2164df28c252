"""A control request the engine refuses (``ControlError``) and the checks every
control verb shares (an operator's reason, a text's length): kept below the verbs so
that lifecycle, budget, unknown outcomes and the rest raise the same error without
importing each other."""


class ControlError(Exception):
    """A request the engine refuses, with a machine-readable ``code`` (e.g.
    ``unknown_workflow``, ``invalid_input``, ``run_terminal``) and optional field
    ``errors`` (``{field: message}``)."""

    def __init__(self, code: str, message: str, errors: dict[str, str] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.errors = errors or {}


#: The operator actions whose event records a reason (the audit log's "why"); each
#: refuses a blank one the same way on every channel (API, CLI, console, admin).
REASONED_ACTIONS = ("cancel", "pause", "resume", "retry", "budget", "replay", "resolve")


#: The longest reason an operator action takes, in characters, on every channel (the
#: API's schemas, the console's forms and the CLI all end here or use this).
MAX_REASON_CHARS = 2000
#: The longest evidence an operator gives for a resolution, in characters.
MAX_EVIDENCE_CHARS = 4000


def require_reason(reason: str | None, action: str) -> str:
    """``reason`` stripped, for ``action`` (one of ``REASONED_ACTIONS``). Raises
    ``ControlError("reason_required")`` naming the ``reason`` field when it is blank,
    ``ControlError("invalid_input")`` when it is longer than ``MAX_REASON_CHARS``
    (refused whole, never cut)."""
    text = (reason or "").strip()
    if not text:
        raise ControlError(
            "reason_required", f"{action} needs a reason (recorded in the audit log)",
            {"reason": "required"},
        )  # fmt: skip
    check_length(text, "reason", MAX_REASON_CHARS)
    return text


def check_length(text: str, field: str, limit: int) -> None:
    """Raise ``ControlError("invalid_input")`` naming ``field`` if ``text`` is longer
    than ``limit`` characters: a long value is refused whole, never cut."""
    if len(text) > limit:
        raise ControlError(
            "invalid_input",
            f"{field} must be at most {limit} characters (it has {len(text)})",
            {field: f"at most {limit} characters"},
        )
