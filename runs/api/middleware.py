"""Request limits for the API that must apply before any view parses the body, and
JSON bodies for every error under /api/."""

import re

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import JsonResponse
from django.utils.decorators import sync_and_async_middleware

from runs.api.errors import as_json_error
from runs.api.request_gates import is_json_media_type
from runs.engine.service import InvalidJson, field_code, parse_json, text_problem


def _refuse(status: int, code: str, message: str, errors=None) -> JsonResponse:
    return JsonResponse({"code": code, "message": message, "errors": errors or {}}, status=status)


@sync_and_async_middleware
def ApiBodyLimitMiddleware(get_response):  # noqa: N802 - named like a class in MIDDLEWARE
    """For paths under /api/: refuse bodies over ``AGENTOPS_API_MAX_BODY_BYTES`` with 413
    (by Content-Length when given, else after reading), NUL characters in the query
    string with 400, and JSON bodies holding a value no database stores faithfully (NUL,
    a lone UTF-16 surrogate, NaN...) in any key or value with 422 naming the path and the
    field's code (``invalid_input``, or an identifier's own: ``field_code``), before any
    view runs, so nothing is half-written. Works in both sync and async stacks, so the
    SSE view stays async under ASGI."""
    if iscoroutinefunction(get_response):

        async def async_middleware(request):
            return _refusal(request) or await get_response(request)

        return async_middleware

    def middleware(request):
        return _refusal(request) or get_response(request)

    return middleware


@sync_and_async_middleware
def ApiJsonErrorsMiddleware(get_response):  # noqa: N802 - named like a class in MIDDLEWARE
    """For paths under /api/: an error response that is not JSON (Django's 400 for a
    Host header outside ``ALLOWED_HOSTS``, its 404 page, the 405 of a wrong method, a 500
    page) is answered as the API's error body (``runs.api.errors.as_json_error``). The
    outermost middleware, so it also sees what the others answered before any view."""
    if iscoroutinefunction(get_response):

        async def async_middleware(request):
            return as_json_error(request, await get_response(request))

        return async_middleware

    def middleware(request):
        return as_json_error(request, get_response(request))

    return middleware


#: Paths whose body is one JSON value the engine checks whole with the same rules
#: (a signal's payload: ``rules.value_problem``), naming the field as every face does
#: (``payload.note``); the body gate would name it ``note``.
_ENGINE_CHECKED_BODY = re.compile(r"^/api/v1/runs/[^/]+/signals/[^/]+/?$")


def _refusal(request) -> JsonResponse | None:
    if not request.path.startswith("/api/"):
        return None
    limit = settings.AGENTOPS_API_MAX_BODY_BYTES
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return _refuse(400, "invalid_request", "bad Content-Length header")
    if declared > limit:
        return _refuse(413, "body_too_large", f"request body is over {limit} bytes")
    if "\x00" in request.META.get("QUERY_STRING", "") or any(
        "\x00" in v for _, items in request.GET.lists() for v in items
    ):
        return _refuse(400, "invalid_request", "NUL characters are not allowed")
    if request.method in ("POST", "PUT", "PATCH"):
        body = request.body
        if len(body) > limit:
            return _refuse(413, "body_too_large", f"request body is over {limit} bytes")
        # A body not sent as JSON is refused whole by the operation's gate
        # (runs.api.request_gates: 415), not searched for bad characters here.
        skip = _ENGINE_CHECKED_BODY.match(request.path) or not is_json_media_type(
            request.META.get("CONTENT_TYPE") or ""
        )
        found = None if skip else body_problem(body)
        if found is not None:
            field, reason = found
            # An identifier's own code (invalid_thread for a thread id), as the engine
            # answers for its other bad characters.
            return _refuse(422, field_code(field), f"{field}: {reason}", {field: reason})
    return None


def body_problem(body: bytes) -> tuple[str, str] | None:
    """``(field, reason)`` for the first key or string of the JSON ``body`` that breaks
    the engine's text rule (``runs.engine.rules.text_problem``: NUL, a lone UTF-16
    surrogate). A gate before any view parses the body, because every text field of
    every endpoint is held to it, lookup keys (names, checkpoints) that the engine never
    stores and so never checks included. ``field`` is a
    dotted path such as ``input.question`` (a key's problem names the object holding
    it), or ``body``. ``None`` when there is none, and for bad JSON (the view reports
    it). Numbers are left to the schemas, which name non-finite ones."""
    if not body.strip():
        return None
    try:
        data = parse_json(body)
    except InvalidJson:
        return None
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            reason = text_problem(item)
            if reason:
                return path or "body", reason
        elif isinstance(item, dict):
            for key, value in item.items():
                reason = text_problem(key)
                if reason:
                    return path or "body", f"a key: {reason}"
                child = key if not path else f"{path}.{key}"
                if not key.isidentifier():
                    child = f"{path}[{key!r}]"
                stack.append((child, value))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", value) for i, value in enumerate(item))
    return None
