"""A request that gives up on the database answers 503 with a code, and one that brings a
value no database stores faithfully answers 422 with a code, not a server error."""

from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.deprecation import MiddlewareMixin

from runs.engine.service import DB_BUSY, DB_LOST, InvalidValue, classify_db_fault

#: Seconds a client should wait before trying again.
RETRY_AFTER_SECONDS = 2

_ANSWERS = {
    DB_BUSY: (
        "database_busy",
        "The database did not answer in time (a lock or statement waited past its limit); "
        "nothing was changed. Try again shortly.",
    ),
    DB_LOST: (
        "database_unavailable",
        "The connection to the database was lost; nothing was changed. Try again shortly.",
    ),
}


class DatabaseBusyMiddleware(MiddlewareMixin):
    """Turns a lock or statement timeout (``agentops.db_session`` limits) and a lost
    database connection into 503 with ``Retry-After``: a JSON error body with code
    ``database_busy`` / ``database_unavailable`` under /api/, a short page otherwise.
    The view's transaction was rolled back, so nothing is half-written. Other errors
    pass through. Sync and async capable (``MiddlewareMixin``), so the SSE view stays
    async under ASGI."""

    def process_exception(self, request, exception):
        kind = classify_db_fault(exception)
        if kind is None:
            return None
        code, message = _ANSWERS[kind]
        if request.path.startswith("/api/"):
            response: HttpResponse = JsonResponse(
                {"code": code, "message": message, "errors": {}}, status=503
            )
        else:
            # The fragment alone: the full layout could need the database again.
            html = render_to_string(
                "partials/refused.html", {"title": "Database busy", "message": message}
            )
            response = HttpResponse(html, status=503)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response


class InvalidValueMiddleware(MiddlewareMixin):
    """Turns ``InvalidValue`` (a value a checked model field refused: NaN, a non-string
    key, a date, bytes... sent by an operator or a client) into 422 with code
    ``invalid_input`` (the API's code for every refused value): a JSON error body naming
    the path under /api/, a short page otherwise. The field raised it before any SQL was
    sent and the view's transaction was rolled back, so nothing is half-written. Sync and
    async capable (``MiddlewareMixin``)."""

    def process_exception(self, request, exception):
        if not isinstance(exception, InvalidValue):
            return None
        if request.path.startswith("/api/"):
            body = {
                "code": "invalid_input",
                "message": exception.detail,
                "errors": {exception.field(): exception.reason},
            }
            return JsonResponse(body, status=422)
        html = render_to_string(
            "partials/refused.html", {"title": "Value not accepted", "message": exception.detail}
        )
        return HttpResponse(html, status=422)
