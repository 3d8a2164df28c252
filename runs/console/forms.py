"""Small form helpers shared by the console's pages and actions."""

from urllib.parse import unquote_to_bytes

from django.http import HttpRequest, QueryDict

from runs.engine.service import INVALID_INPUT, InvalidJson, parse_json, text_problem, value_problem

#: The code of a form field that is not JSON (or has a key twice), as the API and the
#: CLI name it.
INVALID_JSON = "invalid_json"


class InvalidInput(ValueError):
    """A form value the action cannot use; the message says why, ``code`` is the
    machine-readable code of the refusal page (``invalid_input`` unless given, as the
    CLI and the API name it)."""

    def __init__(self, message: str, code: str = INVALID_INPUT):
        super().__init__(message)
        self.code = code


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


def posted_text(post, name: str) -> str:
    """The form field ``name`` stripped (``""`` when absent), for an engine verb that
    checks it itself: a reason (blank: ``reason_required``), evidence
    (``evidence_required``), each with its length, so every face answers one code."""
    return (post.get(name) or "").strip()


#: The content type of a form whose body Django decodes itself.
FORM_TYPE = "application/x-www-form-urlencoded"


def undecodable_field(encoded: str | bytes) -> str | None:
    """The name of the first field of the URL-encoded ``encoded`` (a query string or a
    form body) whose name or value, percent-decoded, is not UTF-8 (``a%ED%A0%80b``, a
    lone surrogate's bytes), else ``None``. Django decodes such bytes to U+FFFD, so an
    action would store text nobody sent; this is read from the raw bytes instead."""
    raw = encoded.encode("latin-1", "replace") if isinstance(encoded, str) else encoded
    for pair in raw.split(b"&"):
        name, _, value = pair.partition(b"=")
        try:
            unquote_to_bytes(name.replace(b"+", b" ")).decode("utf-8")
            unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            return unquote_to_bytes(name).decode("utf-8", "replace")
    return None


def undecodable_input(request: HttpRequest) -> str | None:
    """The name of the first query or form field (``undecodable_field``) of ``request``
    that is not UTF-8 once percent-decoded, else ``None``; a multipart body is left to
    its parser."""
    name = undecodable_field(request.META.get("QUERY_STRING", ""))
    if name is None and request.method == "POST":
        if request.content_type == FORM_TYPE:
            name = undecodable_field(request.body)
    return name


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
    JSON (code ``invalid_json``, as the API and the CLI name it), on a value the engine's
    JSON value rule refuses (``runs.engine.rules.value_problem``: a ``\\u0000`` or lone
    surrogate escape, ``NaN``, ``Infinity``...) or, with ``must_be_object``, on anything
    but a JSON object."""
    raw = (post.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = parse_json(raw)
    except InvalidJson as exc:
        raise InvalidInput(f"{label} is not valid JSON: {exc}.", INVALID_JSON) from exc
    if must_be_object and not isinstance(value, dict):
        raise InvalidInput(f'{label} must be a JSON object, e.g. {{"week": "2026-W48"}}.')
    found = value_problem(value)
    if found is not None:
        path, type_name, reason = found
        raise InvalidInput(f"{label} cannot be stored: at {path}, {reason} ({type_name}).")
    return value
