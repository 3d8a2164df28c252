"""The Python client's hand-written copies of the API's shapes still match the API.

Each document class of ``agentops_client.models`` is compared with the schema of the
API's OpenAPI document (built by django-ninja from ``runs/api/schemas.py`` and the
schedule, signal and approval routers) that it mirrors: the same field names, the same
types (``int``, ``str``, ``datetime``, lists, nested documents, ``None`` allowed or
not) and a field without a default only where the API always sends it. The error codes
the client knows (the ones it retries on, the ones its ``ApiError`` names) are codes the
API answers, read from the API's own code: its status table, its fallback codes and
every code its handlers and the engine raise. A mismatch fails with one line per
difference.
"""

import ast
import dataclasses
import re
import types
import typing
from datetime import datetime
from pathlib import Path
from typing import Any

import agentops_client.client as client_module
import agentops_client.models as models
from agentops_client.errors import ApiError
from runs.api import errors as api_errors
from runs.api.app import api

ROOT = Path(__file__).resolve().parent.parent
#: Client documents whose schema is not named after them (``X`` or ``XOut``).
SCHEMA_OF = {"Delivery": "SignalOut", "Replay": "ReplayOut", "BulkReplay": "BulkReplayOut"}
#: Client fields that come from the response's headers, not its body: ``replayed`` is
#: the ``Idempotency-Replayed`` header.
FROM_HEADERS = {"replayed"}
#: Where the API's codes are raised: its handlers, the engine and the approvals app.
CODE_SOURCES = ("runs", "approvals", "apitokens")


def client_documents() -> dict[str, type]:
    """``{name: dataclass}`` of every document class the client builds."""
    return {
        name: value
        for name, value in vars(models).items()
        if dataclasses.is_dataclass(value)
        and isinstance(value, type)
        and value.__module__ == models.__name__
    }


def schema_name(cls: type, schemas: dict) -> str:
    """The OpenAPI schema a client document mirrors (``""`` when none)."""
    name = cls.__name__
    for candidate in (SCHEMA_OF.get(name), name, name + "Out"):
        if candidate and candidate in schemas:
            return candidate
    return ""


def schema_type(prop: dict) -> Any:
    """A comparable form of an OpenAPI property's type: ``"int"``, ``"str"``,
    ``"datetime"``, ``"bool"``, ``"float"``, ``"dict"``, ``"any"``, ``("list", inner)``,
    ``("model", schema name)`` or ``("optional", inner)``."""
    if "$ref" in prop:
        return ("model", prop["$ref"].rsplit("/", 1)[-1])
    if "anyOf" in prop:
        options = [o for o in prop["anyOf"] if o.get("type") != "null"]
        inner = schema_type(options[0]) if len(options) == 1 else "any"
        return ("optional", inner) if len(options) < len(prop["anyOf"]) else inner
    kind = prop.get("type")
    if kind == "array":
        return ("list", schema_type(prop.get("items", {})))
    if kind == "string":
        return "datetime" if prop.get("format") == "date-time" else "str"
    return {"integer": "int", "boolean": "bool", "number": "float", "object": "dict"}.get(
        kind, "any"
    )


def client_type(hint: Any, schemas: dict) -> Any:
    """The same form for a client field's type hint (a nested document by the schema it
    mirrors)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        inner = client_type(options[0], schemas) if len(options) == 1 else "any"
        return ("optional", inner) if len(options) < len(typing.get_args(hint)) else inner
    if origin is list or hint is list:
        args = typing.get_args(hint)
        return ("list", client_type(args[0], schemas) if args else "any")
    if origin is dict or hint is dict:
        return "dict"
    if origin is typing.Literal:
        return "str"
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return ("model", schema_name(hint, schemas))
    names = {int: "int", str: "str", bool: "bool", float: "float", datetime: "datetime"}
    return names.get(hint, "any")


def same_type(ours: Any, theirs: Any) -> bool:
    """Whether two comparable types agree: ``"any"`` on either side agrees with all, and
    a client ``dict`` with a nested document (kept as its JSON object)."""
    if "any" in (ours, theirs):
        return True
    if ours == "dict" and isinstance(theirs, tuple) and theirs[0] == "model":
        return True
    if isinstance(ours, tuple) and isinstance(theirs, tuple) and ours[0] == theirs[0]:
        return ours[0] == "model" and ours == theirs or same_type(ours[1], theirs[1])
    return ours == theirs


def differences(schemas: dict) -> list[str]:
    """One line per way a client document differs from its schema."""
    found = []
    for name, cls in sorted(client_documents().items()):
        mirrored = schema_name(cls, schemas)
        if not mirrored:
            found.append(f"{name}: no schema of the API is named {name} or {name}Out")
            continue
        schema = schemas[mirrored]
        props, required = schema.get("properties", {}), set(schema.get("required", []))
        hints = typing.get_type_hints(cls)
        fields = {
            f.name: f for f in dataclasses.fields(cls) if f.init and f.name not in FROM_HEADERS
        }
        where = f"{name} ({mirrored})"
        for missing in sorted(set(props) - set(fields)):
            found.append(f"{where}: the API's field {missing} is not in the client")
        for extra in sorted(set(fields) - set(props)):
            found.append(f"{where}: the client's field {extra} is not in the API")
        for field_name in sorted(set(fields) & set(props)):
            ours = client_type(hints[field_name], schemas)
            theirs = schema_type(props[field_name])
            if not same_type(ours, theirs):
                found.append(f"{where}.{field_name}: client {ours}, API {theirs}")
            has_default = (
                fields[field_name].default is not dataclasses.MISSING
                or fields[field_name].default_factory is not dataclasses.MISSING
            )
            if not has_default and field_name not in required:
                found.append(f"{where}.{field_name}: required by the client, optional in the API")
    return found


def test_the_clients_documents_match_the_apis_openapi_schemas():
    schemas = api.get_openapi_schema()["components"]["schemas"]
    assert len(client_documents()) >= 20
    # The client's ApiError reads the error body's three fields.
    assert set(schemas["Error"]["properties"]) == {"code", "message", "errors"}
    assert differences(schemas) == []
    # The comparison sees a renamed field, a changed type and a dropped requirement.
    run_out = schemas["RunOut"]
    changed = {
        **schemas,
        "RunOut": {
            **run_out,
            "properties": {
                **{k: v for k, v in run_out["properties"].items() if k != "goal"},
                "aim": {"type": "string"},
                "generation": {"type": "string"},
            },
            "required": [r for r in run_out["required"] if r != "thread_id"],
        },
    }
    assert sorted(differences(changed)) == [
        "Run (RunOut).generation: client int, API str",
        "Run (RunOut).thread_id: required by the client, optional in the API",
        "Run (RunOut): the API's field aim is not in the client",
        "Run (RunOut): the client's field goal is not in the API",
    ]


def raised_codes() -> set[str]:
    """Every code the API's handlers, the engine and the approvals app raise as a
    literal: the ``code`` of ``ApiError(status, code, ...)`` and ``ControlError(code,
    ...)``, positional or by keyword."""
    codes = set()
    for package in CODE_SOURCES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                called = getattr(node.func, "id", getattr(node.func, "attr", ""))
                index = {"ApiError": 1, "ControlError": 0}.get(called)
                if index is None:
                    continue
                given = [*node.args[index : index + 1]]
                given += [k.value for k in node.keywords if k.arg == "code"]
                codes.update(
                    g.value
                    for g in given
                    if isinstance(g, ast.Constant) and isinstance(g.value, str)
                )
    return codes


def client_codes() -> set[str]:
    """The codes the client knows: the ones it retries on and the ones ``ApiError``
    names (its docstring's double-backticked codes)."""
    named = set(re.findall(r"``([a-z]+(?:_[a-z]+)+)``", ApiError.__doc__ or ""))
    return set(client_module._RETRIED_CODES) | named


def test_the_codes_the_client_knows_are_codes_the_api_answers():
    answered = (
        set(api_errors.CONTROL_STATUS)
        | {code for code, _message in api_errors._FALLBACK.values()}
        | {"http_error"}
        | raised_codes()
    )
    assert {"request_in_progress", "run_changed", "unknown_run"} <= answered
    assert {"request_in_progress", "http_error"} <= client_codes()
    assert sorted(client_codes() - answered) == []
