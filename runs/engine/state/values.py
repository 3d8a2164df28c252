"""Values the engine stores: checked before the fenced commit, NUL made storable.

Everything the engine writes into a JSON column (step outputs, errors, messages, tool
arguments and results, events, checkpoints, artifact metadata) must come back from JSON
and from both databases exactly as it went in. ``storable`` checks that and returns the
value to write; what cannot round-trip raises ``InvalidValue`` (a ``StepError`` with
code ``INVALID_OUTPUT``), naming the path inside the value and the offending type, so
the attempt fails once with the real cause instead of crashing the worker:

- only ``dict`` with ``str`` keys, ``list``, ``str``, ``int``, finite ``float``,
  ``bool`` and ``None``, or subclasses stored as their base type (a ``tuple`` would
  come back a list, an ``int`` key a string, a ``datetime``/``Decimal``/``bytes``/``set``
  not at all);
- no NaN or infinity (PostgreSQL ``jsonb`` and SQLite ``JSON_VALID`` refuse them), no
  integral float of 1e16 or more (``jsonb`` gives back a different ``int``);
- no lone UTF-16 surrogates in text (not encodable as UTF-8);
- at most ``MAX_DEPTH`` levels of nesting.

NUL (U+0000) cannot be stored in PostgreSQL text or ``jsonb``. Rather than refusing
it, ``storable`` and ``storable_text`` replace it with the six characters ``\\u0000``
(``NUL_ESCAPE``) on both backends, so the console shows it escaped. That is storage
encoding for what the engine writes; input from outside is refused instead by the
input rules (``runs.engine.rules``).
"""

import json
import math
from typing import Any

from runs.engine.errors import StepError

#: Error code of a value that cannot be stored faithfully (never retried: the same code
#: returns the same value).
INVALID_OUTPUT = "INVALID_OUTPUT"
#: What a NUL character becomes in stored text.
NUL_ESCAPE = "\\u0000"
#: Deepest nesting accepted (PostgreSQL's jsonb and Python's recursion both have limits).
MAX_DEPTH = 200


class InvalidValue(StepError):
    """A value cannot be stored faithfully. ``path`` is where inside it (``$`` is the
    value itself, e.g. ``$.by_id`` or ``$.items[3]``), ``type_name`` the Python type
    found there, ``reason`` why it cannot be stored, ``where`` what the value is
    (``output``, ``message``, ``tool arguments``...)."""

    def __init__(self, where: str, path: str, type_name: str, reason: str):
        super().__init__(INVALID_OUTPUT, f"{where} at {path}: {reason} ({type_name})")
        self.where = where
        self.path = path
        self.type_name = type_name
        self.reason = reason

    def field(self) -> str:
        """Where and path as one dotted name for an error body: ``input.score``,
        ``Run.input.by_id[1]``."""
        return self.where + self.path[1:]


def storable_text(text: str) -> str:
    """``text`` ready for a text column: NUL replaced by ``NUL_ESCAPE``, lone surrogates
    by their ``\\udXXX`` escape. Never raises (for error details and other text the
    engine itself must always be able to write)."""
    if "\x00" in text:
        text = text.replace("\x00", NUL_ESCAPE)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


#: Longest error code a step or run row keeps (the column's length).
MAX_CODE = 64


def storable_error(error: StepError) -> StepError:
    """``error`` with its ``code`` and ``detail`` made storable in place: both turned into
    text (a step may raise ``StepError(42, ...)``), passed through ``storable_text``, and
    the code cut to ``MAX_CODE`` characters (a longer one would not fit its column).
    Returns ``error``; never raises."""
    error.code = storable_text(str(error.code))[:MAX_CODE] or "INTERNAL"
    error.detail = storable_text(str(error.detail))
    return error


class InvalidJson(ValueError):
    """Outside text that is not JSON the engine will read: malformed, or nested deeper
    than ``MAX_DEPTH``. ``code`` is ``invalid_json`` on every channel."""

    code = "invalid_json"


def parse_json(text: str | bytes) -> Any:
    """The one parser for JSON from outside (API bodies, webhooks, CLI options, console
    forms): the parsed value. Nesting is counted before parsing, so a deep document is
    refused instead of exhausting Python's recursion. Raises ``InvalidJson`` for text
    that is not JSON (with the parser's reason), nests deeper than ``MAX_DEPTH`` or has
    a key twice in one object (``{"a": 1, "a": 2}``: which one the sender meant is
    unknown, so neither is taken). ``NaN`` and ``Infinity`` parse as floats: the input
    rules refuse them naming their path (``rules.value_problem``)."""
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidJson("not UTF-8 text") from None
    depth = _nesting(text)
    if depth > MAX_DEPTH:
        raise InvalidJson(f"nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, object_pairs_hook=_object_without_duplicates)
    except json.JSONDecodeError as exc:
        raise InvalidJson(f"{exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        # Only reachable below MAX_DEPTH if the interpreter's limit is set very low.
        raise InvalidJson(f"nested deeper than {MAX_DEPTH} levels") from None


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidJson(f"duplicate key {json.dumps(key)} in an object")
            seen.add(key)
    return obj


def _nesting(text: str) -> int:
    """Deepest ``[``/``{`` nesting of ``text`` outside strings (linear, no recursion)."""
    deepest = depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest


def storable(value: Any, where: str = "output") -> Any:
    """Return ``value`` as it will be stored (a copy with NUL escaped in every string
    and key; the value itself when it has none). Raises ``InvalidValue`` naming the
    first path that cannot round-trip through JSON and both databases."""
    return _walk(value, where, "$", 0)


def problem(value: Any) -> tuple[str, str, str] | None:
    """``(path, type_name, reason)`` of the first part of ``value`` that cannot be
    stored, or ``None`` if all of it can."""
    try:
        storable(value)
    except InvalidValue as exc:
        return exc.path, exc.type_name, exc.reason
    return None


def _walk(value: Any, where: str, path: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise InvalidValue(where, path, type(value).__name__, f"nested deeper than {MAX_DEPTH}")
    # Subclasses (a StrEnum, an OrderedDict) are stored as their base type and compare
    # equal to what comes back.
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidValue(where, path, "float", f"{value!r} is not a JSON number")
        if value.is_integer() and abs(value) >= 1e16:
            # JSON writes it with an exponent; PostgreSQL's jsonb keeps the exact decimal
            # and gives back an int that is not this float.
            raise InvalidValue(
                where,
                path,
                "float",
                f"{value!r} cannot be stored exactly: a float of magnitude 1e16 or more "
                "comes back as an integer, not this float (send an integer, or a smaller number)",
            )
        return value
    if isinstance(value, str):
        return _text(value, where, path)
    if isinstance(value, list):
        return [_walk(item, where, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidValue(
                    where,
                    f"{path}[{key!r}]",
                    type(key).__name__,
                    "keys must be strings (JSON turns other keys into strings)",
                )
            out[_text(key, where, path)] = _walk(item, where, child_path(path, key), depth + 1)
        return out
    kind = type(value)
    reasons: dict[type, str] = {
        tuple: "would come back as a list",
        set: "is not JSON",
        frozenset: "is not JSON",
        bytes: "is not JSON (encode it, e.g. base64, or store it as an artifact)",
    }
    reason = reasons.get(kind, "is not JSON (use str, int, float, bool, None, list or dict)")
    raise InvalidValue(where, path, kind.__name__, reason)


def _text(text: str, where: str, path: str) -> str:
    if "\x00" in text:
        text = text.replace("\x00", NUL_ESCAPE)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidValue(where, path, "str", "text holds a lone surrogate") from None
    return text


def child_path(path: str, key: str) -> str:
    """The path of ``key`` inside the object at ``path``: ``$.name``, ``$['a b']``."""
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"
