"""Input rules: what the engine takes from outside (the CLI, the console, the API,
webhooks), each rule written once here and refused with one error class.

- **text** (``text_problem``, ``check_text``, ``check_length``): a string, without NUL
  (PostgreSQL refuses it; the engine would store it escaped, so the sender would not
  read back what it sent) or a lone UTF-16 surrogate (not UTF-8), at most the field's
  length in characters (a long value is refused whole, never cut); an identifier
  (thread id, request id) also without control or bidirectional characters;
- **identifiers** (``identifier_problem``, ``check_identifier``, the table
  ``IDENTIFIERS``): each identifier a face takes (thread id, idempotency key, workflow,
  signal, schedule, step and checkpoint names, API token name) has one rule and one
  code, whatever is wrong with it (NUL, another control, DEL, bidi, a lone surrogate,
  too long) and whichever face it came through; the faces' gates that refuse text before
  parsing name the field's code too (``field_code``);
- **numbers** (``number_problem``): an ``int`` or ``float`` that is finite (no NaN,
  no infinity), never ``true``/``false`` (Python's bools are ints, JSON's are not
  numbers), whole where the field wants a count, inside the field's bounds; each caller
  keeps its own code and message and asks this rule what is wrong;
- **JSON values** (``value_problem``, ``check_value``): what ``values.storable`` can
  store faithfully (finite numbers, string keys, at most ``values.MAX_DEPTH`` levels,
  no lone surrogate) and, unlike an agent's output, no NUL in any string or key;
- **ids** (``parse_id``, the table ``IDS``): a run, approval, takeover, step,
  attempt, artifact, API token or stored value is named by its id (a UUID or a whole
  number); an ill-formed id names nothing, so every face answers it as it answers an
  id that names no row: with the kind's ``unknown_*`` code (``unknown_run``), which the
  API answers as 404 ``not_found``. Nothing is looked up or written for it;
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

Output has one rule too: text shown on a terminal or in a log line (``terminal_text``)
writes every character a terminal acts on as its ``\\uXXXX`` escape; the commands'
output (``runs.cli.terminal``) and the log formatter (``agentops.log_format``) use it.

Storage encoding is another rule: what the engine itself writes (agent output, error
details; never an operator's reason) keeps NUL as ``values.NUL_ESCAPE``
(``values.storable``, the checked model fields) instead of refusing it.
"""

import json
import math
import re
import unicodedata
import uuid
from typing import Any, NamedTuple

import runs.engine.state.values as values
from runs.engine.errors import ControlError
from runs.engine.names import MAX_NAME_CHARS, name_problem

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


#: The characters a terminal acts on: the controls (C0, DEL, C1; Unicode category Cc),
#: lone surrogates (Cs), the line and paragraph separators (Zl, Zp) and the
#: bidirectional controls. Unicode's stability policy fixes those categories' members,
#: so the class is written out: one regular expression scans a large tool output in C
#: rather than one Python call per character.
_UNSAFE_BUT_NEWLINE = re.compile(
    r"[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029"
    + "".join(f"\\u{ord(c):04x}" for c in sorted(BIDI_CONTROLS))
    + "]"
)
_UNSAFE = re.compile(f"[\\n{_UNSAFE_BUT_NEWLINE.pattern[1:]}")
_UNSAFE_BUT_LAYOUT = re.compile(_UNSAFE_BUT_NEWLINE.pattern.replace("\\x00-\\x09", "\\x00-\\x08"))


def is_unsafe(char: str) -> bool:
    """Whether the one character ``char`` acts on a terminal (a control, a lone
    surrogate, a line or paragraph separator or a bidirectional control)."""
    return _UNSAFE.fullmatch(char) is not None


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def terminal_text(
    text: object, limit: int | None = None, *, newlines: bool = False, tabs: bool = False
) -> str:
    """``text`` (any value; ``str()`` of it) with every character that acts on a
    terminal (``is_unsafe``: ESC would start a sequence that clears the screen, ``\\r``
    overwrite what was printed, U+202E reverse what follows) written as ``\\uXXXX``,
    also a valid JSON escape of the same character; ``\\n`` kept when ``newlines``
    (output meant to span lines), and ``\\t`` too when ``tabs`` as well (a page's
    preformatted text). Cut to ``limit`` characters (after escaping) with ``...`` and
    the whole length, ``"... (N characters)"``, when longer. Never raises."""
    unsafe = (
        _UNSAFE_BUT_LAYOUT if newlines and tabs else _UNSAFE_BUT_NEWLINE if newlines else _UNSAFE
    )
    text = unsafe.sub(_escape, str(text))
    if limit is not None and len(text) > limit:
        return f"{text[:limit]}... ({len(text)} characters)"
    return text


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


def check_length(text: Any, field: str, limit: int) -> None:
    """Raise ``InputRefused`` naming ``field`` if the free text ``text`` (a reason,
    evidence, a comment) is not text (a JSON number, ``null``...), is longer than
    ``limit`` characters (refused whole, never cut) or breaks the text rule (NUL, a lone
    surrogate): it is stored as sent or not at all."""
    if not isinstance(text, str):
        raise InputRefused(field, "must be text")
    if len(text) > limit:
        raise InputRefused(
            field,
            f"at most {limit} characters",
            message=f"{field} must be at most {limit} characters (it has {len(text)})",
        )
    check_text(text, field)


#: Longest text the engine takes from outside, in characters, per field: the engine
#: checks these, and the faces (API schemas, console forms, CLI) take their limits from
#: here. ``thread_id``, ``request_id`` and ``error_code`` (a filter of bulk replays) are
#: the sizes of their columns.
MAX_CHARS = {
    "reason": 2000,
    "evidence": 4000,
    "comment": 2000,
    "message": 4000,
    "thread_message": 16384,
    "thread_id": 200,
    "request_id": 200,
    "error_code": 64,
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


class Identifier(NamedTuple):
    """How one kind of identifier is checked: ``code``, the refusal's code on every face;
    ``limit``, its longest length in characters; ``label``, how messages name it;
    ``name_rule``, held to the name rule (``runs.engine.names``: ASCII letters, digits,
    ``.``, ``_``, ``-``) instead of the identifier text rule."""

    code: str
    limit: int
    label: str
    name_rule: bool = False


#: Every identifier the faces take, by the field name they take it as (the console's
#: form field, the API's body field, the engine's keyword). A run, approval, takeover
#: or other row's id is a UUID or a number with a rule of its own (``IDS``).
IDENTIFIERS = {
    "thread_id": Identifier("invalid_thread", MAX_CHARS["thread_id"], "thread id"),
    "request_id": Identifier("invalid_idempotency_key", MAX_REQUEST_ID_CHARS, "idempotency key"),
    "workflow": Identifier(INVALID_INPUT, MAX_NAME_CHARS, "workflow name", name_rule=True),
    "signal": Identifier(INVALID_INPUT, MAX_NAME_CHARS, "signal name", name_rule=True),
    "schedule": Identifier(INVALID_INPUT, MAX_NAME_CHARS, "schedule name", name_rule=True),
    # The sizes of their columns (Step.name, Checkpoint.name, ApiToken.name).
    "step": Identifier(INVALID_INPUT, 100, "step name"),
    "checkpoint": Identifier(INVALID_INPUT, 120, "checkpoint name"),
    "token_name": Identifier(INVALID_INPUT, 100, "token name"),
}


def identifier_problem(value: Any, kind: str) -> str | None:
    """Why ``value`` cannot be the identifier ``kind`` (a key of ``IDENTIFIERS``), or
    ``None`` when it can: blank or not text, or what its rule finds (``request_id_problem``
    for an idempotency key, ``name_problem`` for a name, else ``text_problem`` of an
    identifier with the kind's limit). Raises ``KeyError`` for an unknown ``kind``."""
    spec = IDENTIFIERS[kind]
    if kind == "request_id":
        return request_id_problem(value)
    if not isinstance(value, str) or not value.strip():
        return "must be non-empty text"
    if spec.name_rule:
        return name_problem(value)
    return text_problem(value, limit=spec.limit, identifier=True)


def check_identifier(value: Any, kind: str, field: str = "") -> str:
    """``value`` when ``identifier_problem`` finds nothing; raises ``InputRefused`` with
    the kind's code naming ``field`` (default: ``kind``) otherwise, its message naming
    the kind and its length (``thread id must be non-empty text (1..200 characters)``)."""
    reason = identifier_problem(value, kind)
    if reason is not None:
        spec = IDENTIFIERS[kind]
        bound = "" if spec.name_rule else f" (1..{spec.limit} characters)"
        raise InputRefused(
            field or kind, reason, code=spec.code, message=f"{spec.label} {reason}{bound}"
        )
    return value


def field_code(field: str) -> str:
    """The code a face answers when it refuses the value of ``field`` before parsing it
    (NUL, a lone surrogate): the identifier's code for a field in ``IDENTIFIERS``,
    ``invalid_input`` for any other."""
    spec = IDENTIFIERS.get(field)
    return INVALID_INPUT if spec is None else spec.code


class IdKind(NamedTuple):
    """One kind of id: ``code``, the answer on every face to an id of this kind that is
    ill-formed or names no row (the API's is 404 ``not_found``); ``label``, how messages
    name it; ``uuid``, a UUID rather than a whole number."""

    code: str
    label: str
    uuid: bool = False


#: Every kind of id the faces take in a URL path, a command argument or a form, by the
#: name the faces' converters and lookups use.
IDS = {
    "run": IdKind("unknown_run", "run", uuid=True),
    "approval": IdKind("unknown_approval", "approval"),
    "takeover": IdKind("unknown_takeover", "takeover"),
    "step": IdKind("unknown_step", "step"),
    "attempt": IdKind("unknown_attempt", "attempt"),
    "artifact": IdKind("unknown_artifact", "artifact"),
    "token": IdKind("unknown_token", "API token"),
    "value": IdKind("unknown_value", "value"),
}
#: Largest whole-number id: the largest value of a 64-bit primary key column.
MAX_ID = 2**63 - 1
_WHOLE_ID = re.compile(r"[0-9]{1,19}")
# ASCII only: ``uuid.UUID`` would read other scripts' digits too.
_UUID_ID = re.compile(r"[0-9a-fA-F]{8}(-?[0-9a-fA-F]{4}){3}-?[0-9a-fA-F]{12}")


def parse_id(value: Any, kind: str) -> uuid.UUID | int | None:
    """The id ``value`` (text) names for the id ``kind`` (a key of ``IDS``), or ``None``
    when it is ill-formed: a run id is a UUID (32 ASCII hex digits, hyphenated or not,
    any case); any other id is ASCII digits from 1 to ``MAX_ID``. Never raises for a
    bad value; ``KeyError`` for an unknown ``kind``."""
    if IDS[kind].uuid:
        if isinstance(value, str) and _UUID_ID.fullmatch(value):
            return uuid.UUID(value)
        return None
    if not isinstance(value, str) or not _WHOLE_ID.fullmatch(value):
        return None
    number = int(value)
    return number if 1 <= number <= MAX_ID else None


def unknown_id_message(value: Any, kind: str) -> str:
    """What every face says of an id of ``kind`` that names nothing: ``no approval 12``,
    ``no run 'x y'`` (quoted unless it is letters, digits and hyphens only; escaped
    as ``terminal_text``, cut to 80 characters)."""
    text = terminal_text(value, 80)
    return f"no {IDS[kind].label} {text if re.fullmatch(r'[0-9A-Za-z-]+', text) else repr(text)}"


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


_TEXT_INTEGER = re.compile(r"\s*[+-]?[0-9]{1,30}\s*")
_TEXT_DECIMAL = re.compile(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,3})?\s*")


def number_from_text(value: Any) -> Any:
    """A number typed as text (a CLI argument, a console form field) as the JSON number
    it stands for: ``"5"`` -> ``5`` (an ``int``, exact), ``" 0.5 "`` -> ``0.5``; any
    other value (``"abc"``, ``"NaN"``, ``"true"``, a number, ``None``) is returned
    unchanged for ``number_problem`` to judge. Only the text faces call this: a JSON face
    (the API) hands its value to the rule as sent, so ``"5"`` there is text, not a
    number. Never raises."""
    if not isinstance(value, str):
        return value
    if _TEXT_INTEGER.fullmatch(value):
        return int(value)
    if _TEXT_DECIMAL.fullmatch(value):
        return float(value)
    return value


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


def check_object(value: Any, field: str) -> dict[str, Any]:
    """``value`` when it is a JSON object (a dict); raises ``InputRefused``
    (``invalid_input``, ``{field: "must be a JSON object"}``) otherwise, ``null``
    included. A face that reads an omitted value as ``None`` calls it for a value that
    was sent, so a sent ``null`` is refused as the CLI refuses it."""
    if not isinstance(value, dict):
        raise InputRefused(field, "must be a JSON object")
    return value


def check_value(value: Any, field: str, *, code: str = INVALID_INPUT) -> Any:
    """``value`` when ``value_problem`` finds nothing; raises ``InputRefused`` naming
    the place inside it (``field`` + path: ``payload.note``) otherwise."""
    found = value_problem(value)
    if found is not None:
        path, type_name, reason = found
        raise InputRefused(field + path[1:], f"{reason} ({type_name})", code=code)
    return value
