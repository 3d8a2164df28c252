"""Error bodies of the API: ``{"code": str, "message": str, "errors": {field: message}}``.

``code`` is stable and machine-readable; ``errors`` names the offending fields (dotted
paths into the body, or the header / query parameter name) and may be empty.
"""

from django.http import JsonResponse

from runs.api.schemas import Error
from runs.engine.service import ControlError

#: The error statuses any endpoint may answer: bad input (400, 413, 415, 422), no or bad
#: credentials (401), not allowed (403), not found (404), a method the path does not
#: take (405, with ``Allow``), a conflict (409), the database busy (503).
COMMON_ERROR_STATUSES = (400, 401, 403, 404, 405, 409, 413, 415, 422, 503)


def error_responses(*extra: int) -> dict[int, type[Error]]:
    """The error part of an endpoint's ``response=`` (its OpenAPI document):
    ``{status: Error}`` for ``COMMON_ERROR_STATUSES`` and the ``extra`` statuses (e.g.
    429 where requests are throttled), in status order."""
    return {status: Error for status in sorted({*COMMON_ERROR_STATUSES, *extra})}


#: HTTP status for ``ControlError`` codes that are neither bad input (422, as
#: ``ControlError.bad_input`` says) nor conflicts (409).
CONTROL_STATUS = {
    "unknown_run": 404,
    "unknown_schedule": 404,
    "not_found": 404,
    "idempotency_key_reused": 422,
    "permission_denied": 403,
    "self_approval_forbidden": 403,
    "approver_role_required": 403,
}


class ApiError(Exception):
    """A refused request: HTTP ``status``, ``code``, ``message`` and field ``errors``;
    ``headers`` are added to the response (e.g. ``Retry-After``)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        errors: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors or {}
        self.headers = headers or {}

    def body(self) -> dict:
        return {"code": self.code, "message": self.message, "errors": self.errors}


def from_control(exc: ControlError) -> ApiError:
    """The ``ApiError`` for an engine refusal: the codes in ``CONTROL_STATUS`` use
    theirs, bad input (``ControlError.bad_input``) is 422, anything else (state
    conflicts) is 409."""
    status = CONTROL_STATUS.get(exc.code, 422 if exc.bad_input else 409)
    return ApiError(status, exc.code, exc.message, {k: str(v) for k, v in exc.errors.items()})


def not_found(what: str = "run") -> ApiError:
    """404 for anything the caller may not see; another owner's run looks like no run."""
    return ApiError(404, "not_found", f"no such {what}")


#: Code and message of an error response some layer below the API wrote as HTML or
#: plain text: Django's host check (400, the Host header is not in ALLOWED_HOSTS), its
#: URL resolver (404), ninja's method dispatch (405), Django's 500.
_FALLBACK = {
    400: ("bad_request", "the request was refused before it reached the API"),
    404: ("not_found", "no such endpoint"),
    405: ("method_not_allowed", "method not allowed"),
    500: ("internal_error", "the server failed; the request may not have been applied"),
}


def as_json_error(request, response):
    """``response``, or for an error under /api/ that is not JSON, the API's error body
    with the same status (``not_found``, naming the kind of id for an ill-formed one,
    ``method_not_allowed`` keeping its ``Allow`` header, ``internal_error``, else
    ``http_error``)."""
    if (
        response.status_code < 400
        or not request.path.startswith("/api/")
        or response.streaming
        or response.get("Content-Type", "").startswith("application/json")
    ):
        return response
    code, message = _FALLBACK.get(response.status_code, ("http_error", response.reason_phrase))
    missing = getattr(response, "refusal_code", None) or "not_found"
    if response.status_code == 404 and missing != "not_found":
        # An id the path's converter refused (runs.id_converters): it names no row, as
        # an unknown id, which the API answers 404 not_found too.
        message = "no such " + missing.removeprefix("unknown_").replace("_", " ")
    if response.status_code == 405 and response.has_header("Allow"):
        message = f"{request.method} is not allowed here; use {response['Allow']}"
    replaced = JsonResponse(
        {"code": code, "message": message, "errors": {}}, status=response.status_code
    )
    for header in ("Allow", "WWW-Authenticate", "Retry-After"):
        if response.has_header(header):
            replaced[header] = response[header]
    return replaced
