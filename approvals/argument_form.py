"""An agent tool call's arguments as a form generated from the tool's JSON schema, and
the way back: the posted fields (or the raw JSON) as the arguments an approver wants.

Only the shape is read here (one input per top-level property, typed by its JSON type);
whether the values fit is the tool's own schema's call (``approvals.tool_calls``), so a
refused edit is answered with the tool's field errors, never with this module's guess.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from approvals.plain_text import plain_text
from runs.console.forms import INVALID_JSON, InvalidInput, optional_json
from runs.engine.service import InvalidJson, parse_json

#: The field name prefix of one argument's input (``arg-amount``).
PREFIX = "arg-"
#: JSON types with an input of their own; anything else is edited as JSON text.
SCALAR_TYPES = {"string", "integer", "number", "boolean"}


@dataclass
class ArgumentField:
    """One input of the generated form: ``name`` (the argument), ``kind`` (``string``,
    ``integer``, ``number``, ``boolean`` or ``json``), the ``value`` as the input shows
    it (text), whether the schema requires it, its description and the tool's error."""

    name: str
    kind: str
    value: str
    required: bool = False
    description: str = ""
    error: str = ""
    changed: bool = False
    options: list[str] = field(default_factory=list)

    @property
    def input_name(self) -> str:
        """The form field's name (``arg-<name>``)."""
        return PREFIX + self.name


def _kind(spec: Any) -> str:
    if isinstance(spec, dict):
        kind = spec.get("type")
        if isinstance(kind, str) and kind in SCALAR_TYPES:
            return kind
    return "json"


def _shown(kind: str, value: Any) -> str:
    if value is None:
        return ""
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False)


def fields_for(
    schema: Any,
    arguments: Any,
    *,
    asked: Any = None,
    errors: dict[str, str] | None = None,
) -> list[ArgumentField]:
    """The inputs for ``arguments`` (a dict) under ``schema`` (the tool's JSON schema of
    its arguments): one per schema property, in the schema's order, then one per argument
    the schema does not name. ``asked`` (the model's arguments) marks changed fields;
    ``errors`` are the tool's field errors keyed ``arguments.<name>``."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required") if isinstance(schema, dict) else None
    required = set(required) if isinstance(required, list) else set()
    values = arguments if isinstance(arguments, dict) else {}
    asked = asked if isinstance(asked, dict) else values
    errors = errors or {}
    names = list(properties) + [name for name in values if name not in properties]
    fields = []
    for name in names:
        spec = properties.get(name, {})
        kind = _kind(spec)
        fields.append(
            ArgumentField(
                name=name,
                kind=kind,
                value=_shown(kind, values.get(name)),
                required=name in required,
                description=(
                    plain_text(str(spec.get("description", ""))) if isinstance(spec, dict) else ""
                ),
                error=errors.get(f"arguments.{name}", ""),
                changed=name in values and values.get(name) != asked.get(name),
                options=["true", "false"] if kind == "boolean" else [],
            )
        )
    return fields


def _parsed(kind: str, label: str, text: str) -> Any:
    """The value of one input: numbers and booleans parsed when they look like one and
    left as text otherwise (the tool's schema then says what is wrong with it)."""
    if kind == "string":
        return text
    stripped = text.strip()
    if kind == "boolean":
        return {"true": True, "false": False}.get(stripped, stripped)
    if kind in ("integer", "number"):
        try:
            return int(stripped)
        except ValueError:
            pass
        try:
            number = float(stripped)
        except ValueError:
            return stripped
        return number if number == number and abs(number) != float("inf") else stripped
    try:
        return parse_json(stripped)
    except InvalidJson as exc:
        raise InvalidInput(f"{label} is not valid JSON: {exc}.", INVALID_JSON) from exc


def posted_arguments(post, schema: Any, asked: Any) -> Any:
    """The arguments an approver posted: from the raw JSON (``arguments``) when
    ``edit_mode`` is ``json`` or absent (the API-like form of old), else from the
    generated inputs (``arg-<name>``; an empty optional input leaves the argument out).
    ``None`` when nothing was posted. Raises ``InvalidInput`` for JSON that does not
    parse (raw, or one JSON-typed input)."""
    if post.get("edit_mode", "json") != "form":
        return optional_json(post, "arguments", label="The arguments")
    arguments: dict[str, Any] = {}
    for spec in fields_for(schema, asked):
        if spec.input_name not in post:
            continue
        text = post.get(spec.input_name, "")
        if text.strip() == "" and not (spec.kind == "string" and spec.required):
            continue
        arguments[spec.name] = _parsed(spec.kind, f"The argument {spec.name}", text)
    return arguments


def canonical(arguments: Any) -> str:
    """``arguments`` as one canonical JSON text (sorted keys): what a confirmation
    carries to prove it confirms exactly the diff that was shown."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def diff(asked: Any, edited: Any) -> list[dict[str, Any]]:
    """The changed arguments, one row per name: ``{"name", "asked", "edited"}`` (JSON
    text; ``None`` for a side that has no such argument), names in the model's order."""
    before = asked if isinstance(asked, dict) else {}
    after = edited if isinstance(edited, dict) else {}
    rows = []
    for name in list(before) + [n for n in after if n not in before]:
        if before.get(name, ...) != after.get(name, ...):
            rows.append(
                {
                    "name": name,
                    "asked": json.dumps(before[name], ensure_ascii=False)
                    if name in before
                    else None,
                    "edited": json.dumps(after[name], ensure_ascii=False)
                    if name in after
                    else None,
                }
            )
    return rows
