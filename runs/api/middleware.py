"""Request limits for the API that must apply before any view parses the body."""

import json

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import JsonResponse
from django.utils.decorators import sync_and_async_middleware


def _refuse(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"code": code, "message": message, "errors": {}}, status=status)


@sync_and_async_middleware
def ApiBodyLimitMiddleware(get_response):  # noqa: N802 - named like a class in MIDDLEWARE
    """For paths under /api/: refuse bodies over ``AGENTOPS_API_MAX_BODY_BYTES`` with 413
    (by Content-Length when given, else after reading), and NUL characters anywhere in
    the query string or body with 400 (PostgreSQL cannot store them; refusing them here
    keeps every endpoint from failing later with a 500). Works in both sync and async
    stacks, so the SSE view stays async under ASGI."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            return _refusal(request) or await get_response(request)
    else:

        def middleware(request):
            return _refusal(request) or get_response(request)

    return middleware


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
        "\x00" in v for values in request.GET.lists() for v in values[1]
    ):
        return _refuse(400, "invalid_request", "NUL characters are not allowed")
    if request.method in ("POST", "PUT", "PATCH"):
        body = request.body
        if len(body) > limit:
            return _refuse(413, "body_too_large", f"request body is over {limit} bytes")
        if b"\x00" in body or (b"\\u0000" in body and _has_nul(body)):
            return _refuse(400, "invalid_request", "NUL characters are not allowed")
    return None


def _has_nul(body: bytes) -> bool:
    """True if the JSON ``body`` decodes to a string (key or value) containing NUL; bad
    JSON gives ``False`` (the view reports it)."""
    try:
        stack = [json.loads(body)]
    except ValueError:
        return False
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
