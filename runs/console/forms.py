"""Small form helpers shared by the console's actions."""

import json

from runs.engine.state import values


class InvalidInput(ValueError):
    """A form value the action cannot use; the message says why."""


def required_text(post, name: str, label: str, limit: int = 4000) -> str:
    """A required, stripped text field; raises ``InvalidInput`` if blank."""
    value = (post.get(name) or "").strip()
    if not value:
        raise InvalidInput(f"{label} is required.")
    return value[:limit]


def optional_json(post, name: str, *, label: str, must_be_object: bool = False):
    """Parse an optional JSON field: ``None`` when blank; raises ``InvalidInput`` on bad
    JSON, on a value no database stores faithfully (``NaN``, ``Infinity``: Python's JSON
    reader accepts them) or, with ``must_be_object``, on anything but a JSON object."""
    raw = (post.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{label} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
        ) from exc
    if must_be_object and not isinstance(value, dict):
        raise InvalidInput(f'{label} must be a JSON object, e.g. {{"week": "2026-W48"}}.')
    found = values.problem(value)
    if found is not None:
        path, type_name, reason = found
        raise InvalidInput(f"{label} cannot be stored: at {path}, {reason} ({type_name}).")
    return value
