"""Input rules: what the engine takes from outside (the CLI, the console, the API,
webhooks), each rule written once here and refused with one error class.

- **text** (``text_problem``, ``check_text``, ``check_length``): a string, without NUL
  (PostgreSQL refuses it; the engine would store it escaped, so the sender would not
  read back what it sent) or a lone UTF-16 surrogate (not UTF-8), at most the field's
  length in characters (a long value is refused whole, never cut); an identifier
  (thread id, request id) also without control or bidirectional characters;
- **numbers** (``number_problem``): an ``int`` or ``float`` that is finite (no NaN,
  no infinity), never ``true``/``false`` (Python's bools are ints, JSON's are not
  numbers), whole where the field wants a count, inside the field's bounds; each caller
  keeps its own code and message and asks this rule what is wrong;
- **JSON values** (``value_problem``, ``check_value``): what ``values.storable`` can
  store faithfully (finite numbers, string keys, at most ``values.MAX_DEPTH`` levels,
  no lone surrogate) and, unlike an agent's output, no NUL in any string or key;
- **request ids** (``request_id_problem``): an idempotency key is non-blank text of at
  most ``MAX_REQUEST_ID_CHARS``; one sent as an HTTP header is also printable ASCII
  without spaces (the API's ``Idempotency-Key``);
- **states**: which verb applies in which state is ``runs.states.command_allows``,
  checked by the engine's verbs under the run's lock.

A broken rule raises ``InputRefused`` (a ``ControlError``: ``code``, ``field`` and
``reason``). The faces translate it: the CLI into one line ending ``[code]`` and a
non-zero exit, the console into a 400 page (its form error), the API into 422 with
``{"code", "message", "errors": {field: reason}}``. Faces that must refuse before they
parse anything (the API's body gate, the console's form gate, the CLI's argument gate)
call the same functions.

Storage encoding is another rule: what the engine itself writes (agent output, error
details; never an operator's reason) keeps NUL as ``values.NUL_ESCAPE``
(``values.storable``, the checked model fields) instead of refusing it.
"""

import json
import math
import re
import unicodedata
from typing import Any

import runs.engine.state.values as values
from runs.engine.errors import ControlError

#: The code of a value the rules refuse, on every face.
INVALID_INPUT = "invalid_input"


class InputRefused(ControlError):
    """An outside value breaks an input rule. ``field`` names it as the sender sent it
    (``reason``, ``payload.amount``, ``input.question``), ``reason`` says why; ``code``
    is ``invalid_input`` unless the verb names its own (``invalid_thread``)."""

    def __init__(self, field: str, reason: str, *, code: str = INVALID_INPUT, message: str = ""):
        super().__init__(code, message or f"{field} {reason}", {field: reason})
        self.field = field
        self.reason = reason


#: Bidirectional marks, embeddings, overrides and isolates: in an identifier they make
#: two different ids look alike, or one look like another.
BIDI_CONTROLS = frozenset(
    chr(c) for c in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
)


def text_problem(value: Any, *, limit: int | None = None, identifier: bool = False) -> str | None:
    """Why ``value`` cannot be taken as text (not a string, over ``limit`` characters,
    NUL, a lone surrogate), or ``None`` when it can. Blank text is the caller's rule.

    An ``identifier`` (thread id, request id: typed again, compared, printed on one line)
    also refuses every other C0/C1 control character (tab, newline and ESC included) and
    bidirectional control. Free text (messages, comments, reasons, values) keeps them:
    every face shows it escaped (templates, ``runs.cli.terminal``)."""
    if not isinstance(value, str):
        return "must be text"
    if limit is not None and len(value) > limit:
        return f"must be at most {limit} characters"
    if "\x00" in value:
        return "must not contain NUL (\\u0000) characters"
    if identifier:
        for char in value:
            if char in BIDI_CONTROLS or unicodedata.category(char) == "Cc":
                return f"must not contain control or bidirectional characters (\\u{ord(char):04x})"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "text holds a lone surrogate"
    return None


def check_text(
    value: Any,
    field: str,
    *,
    limit: int | None = None,
    code: str = INVALID_INPUT,
    identifier: bool = False,
) -> str:
    """``value`` when ``text_problem`` (with ``identifier``) finds nothing; raises
    ``InputRefused`` naming ``field`` (with ``code``) otherwise."""
    reason = text_problem(value, limit=limit, identifier=identifier)
    if reason is not None:
        raise InputRefused(field, reason, code=code)
    return value


def check_length(text: str, field: str, limit: int) -> None:
    """Raise ``InputRefused`` naming ``field`` if the free text ``text`` (a reason,
    evidence, a comment) is longer than ``limit`` characters (refused whole, never cut)
    or breaks the text rule (NUL, a lone surrogate): it is stored as sent or not at
    all."""
    if len(text) > limit:
        raise InputRefused(
            field,
            f"at most {limit} characters",
            message=f"{field} must be at most {limit} characters (it has {len(text)})",
        )
    check_text(text, field)


#: Longest text the engine takes from outside, in characters, per field: the engine
#: checks these, and the faces (API schemas, console forms, CLI) take their limits from
#: here. ``thread_id`` and ``request_id`` are the sizes of their columns.
MAX_CHARS = {
    "reason": 2000,
    "evidence": 4000,
    "comment": 2000,
    "message": 4000,
    "thread_message": 16384,
    "thread_id": 200,
    "request_id": 200,
}
#: Longest request id (idempotency key) in characters.
MAX_REQUEST_ID_CHARS = MAX_CHARS["request_id"]
_HEADER_TEXT = re.compile(r"[\x21-\x7e]+")


def request_id_problem(value: Any, *, header: bool = False) -> str | None:
    """Why ``value`` cannot be a request id (the idempotency key of a start, a signal,
    a message), or ``None`` when it can: blank or not text, or what ``text_problem``
    finds with ``MAX_REQUEST_ID_CHARS``; with ``header`` (the value of an HTTP header)
    also any character that is not printable ASCII or is a space."""
    if not isinstance(value, str) or not value.strip():
        return "must be non-empty text"
    reason = text_problem(value, limit=MAX_REQUEST_ID_CHARS, identifier=True)
    if reason is None and header and not _HEADER_TEXT.fullmatch(value):
        return "must be printable ASCII without spaces"
    return reason


#: ``number_problem``'s answers, one per way a value fails the number rule.
NOT_A_NUMBER = "must be a number"
TRUE_FALSE = "must be a number, not true/false"
NOT_FINITE = "must be a finite number"
NOT_WHOLE = "must be a whole number"
TOO_SMALL = "is too small"
TOO_LARGE = "is too large"


def number_problem(
    value: Any,
    *,
    integer: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
) -> str | None:
    """Why ``value`` is not a number the rule takes, as one of ``TRUE_FALSE`` (a bool),
    ``NOT_A_NUMBER`` (text, ``None``, anything else not an ``int``/``float``),
    ``NOT_FINITE`` (NaN, +/-infinity),
    ``NOT_WHOLE`` (``integer``: a float, even ``2.0``), ``TOO_SMALL`` / ``TOO_LARGE``
    (outside ``minimum``..``maximum``, both inclusive), or ``None`` when it is one.
    Callers turn the answer into their own message; nothing is raised. An ``int`` of
    any size is compared exactly (no float conversion, so ``10**400`` is too large,
    not an ``OverflowError``)."""
    if isinstance(value, bool):
        return TRUE_FALSE
    if not isinstance(value, int | float):
        return NOT_A_NUMBER
    if isinstance(value, float) and not math.isfinite(value):
        return NOT_FINITE
    if integer and not isinstance(value, int):
        return NOT_WHOLE
    if minimum is not None and value < minimum:
        return TOO_SMALL
    if maximum is not None and value > maximum:
        return TOO_LARGE
    return None


#: Largest JSON value the engine takes from outside (a signal payload, a run's or a
#: schedule's input, an input patch), in bytes of its compact UTF-8 JSON. The API's
#: body guard (``AGENTOPS_API_MAX_BODY_BYTES``, default 8 times this) sits above it, so
#: a value this rule takes is never refused by the API's transport alone.
MAX_VALUE_BYTES = 65536


def value_problem(value: Any) -> tuple[str, str, str] | None:
    """``(path, type_name, reason)`` of the first part of the JSON ``value`` the engine
    refuses from outside (signal payloads, run and schedule inputs, results, input
    patches, edited arguments), or ``None``: what ``values.problem`` finds (NaN,
    infinity, non-string keys, too deep, a lone surrogate...), NUL in any string or
    key, and a whole value over ``MAX_VALUE_BYTES`` (path ``$``). ``path`` starts at
    ``$`` (``$.items[3]``)."""
    found = values.problem(value)
    if found is not None:
        return found
    stack: list[tuple[str, Any]] = [("$", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str) and "\x00" in item:
            return path, "str", "must not contain NUL (\\u0000) characters"
        if isinstance(item, dict):
            for key, child in item.items():
                if "\x00" in key:
                    return path, "str", "a key must not contain NUL (\\u0000) characters"
                stack.append((values.child_path(path, key), child))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", child) for i, child in enumerate(item))
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_VALUE_BYTES:
        return "$", type(value).__name__, f"must be at most {MAX_VALUE_BYTES} bytes as JSON"
    return None


def check_value(value: Any, field: str, *, code: str = INVALID_INPUT) -> Any:
    """``value`` when ``value_problem`` finds nothing; raises ``InputRefused`` naming
    the place inside it (``field`` + path: ``payload.note``) otherwise."""
    found = value_problem(value)
    if found is not None:
        path, type_name, reason = found
        raise InputRefused(field + path[1:], f"{reason} ({type_name})", code=code)
    return value
