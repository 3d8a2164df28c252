"""Small form helpers shared by the console's pages and actions."""

from typing import Any

from django.http import QueryDict

from runs.engine.service import (
    INVALID_INPUT,
    MAX_EVIDENCE_CHARS,
    InvalidJson,
    parse_json,
    text_problem,
    value_problem,
)


class InvalidInput(ValueError):
    """A form value the action cannot use; the message says why, ``code`` is the
    machine-readable code of the refusal page (``invalid_input``, as the CLI and the
    API name it)."""

    code = INVALID_INPUT


def unstorable_text(text: str) -> bool:
    """True if ``text`` breaks the engine's text rule (``runs.engine.rules.text_problem``:
    NUL, a lone UTF-16 surrogate)."""
    return text_problem(text) is not None


def unstorable_field(data: QueryDict) -> str | None:
    """The name of the first field of ``data`` (``request.GET`` / ``request.POST``) whose
    name or any value is ``unstorable_text``, else ``None``."""
    for name, given in data.lists():
        if unstorable_text(name) or any(unstorable_text(v) for v in given):
            return name
    return None


def required_text(post, name: str, label: str, limit: int = 4000) -> str:
    """A required, stripped text field of at most ``limit`` characters; raises
    ``InvalidInput`` if blank or longer (a long value is refused whole, never cut)."""
    value = (post.get(name) or "").strip()
    if not value:
        raise InvalidInput(f"{label} is required.")
    if len(value) > limit:
        raise InvalidInput(f"{label} must be at most {limit} characters (it has {len(value)}).")
    return value


def optional_json(post, name: str, *, label: str, must_be_object: bool = False):
    """Parse an optional JSON field: ``None`` when blank; raises ``InvalidInput`` on bad
    JSON, on a value the engine's JSON value rule refuses (``runs.engine.rules.
    value_problem``: a ``\\u0000`` or lone surrogate escape, ``NaN``, ``Infinity``...)
    or, with ``must_be_object``, on anything but a JSON object."""
    raw = (post.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = parse_json(raw)
    except InvalidJson as exc:
        raise InvalidInput(f"{label} is not valid JSON: {exc}.") from exc
    if must_be_object and not isinstance(value, dict):
        raise InvalidInput(f'{label} must be a JSON object, e.g. {{"week": "2026-W48"}}.')
    found = value_problem(value)
    if found is not None:
        path, type_name, reason = found
        raise InvalidInput(f"{label} cannot be stored: at {path}, {reason} ({type_name}).")
    return value


def evidence_and_result(post, label: str = "Evidence") -> tuple[str, Any]:
    """``(evidence, result)`` of a form that says a side effect happened (an unknown
    outcome resolved done, a takeover marked done): ``evidence`` required text of at
    most ``MAX_EVIDENCE_CHARS`` (``required_text`` with ``label``), ``result`` the
    optional JSON of the ``result`` field (``optional_json``; ``None`` when blank).
    Raises ``InvalidInput``."""
    evidence = required_text(post, "evidence", label, MAX_EVIDENCE_CHARS)
    return evidence, optional_json(post, "result", label="The result")
