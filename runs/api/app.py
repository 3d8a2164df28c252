"""The NinjaAPI instance: bearer-token auth, error bodies, routers.

OpenAPI 3 schema at /api/v1/openapi.json, browsable docs at /api/v1/docs.
"""

from django.core.exceptions import PermissionDenied
from django.http import Http404
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from ninja.security import HttpBearer

from apitokens import services as tokens
from runs import id_converters  # noqa: F401 - registers the ids' path converters ({run:run_id})
from runs.api import approvals, deferred_calls, replays, runs, schedules, signals, stream
from runs.api.errors import ApiError, from_control
from runs.api.request_gates import refuse_ignored_input
from runs.engine.service import ControlError, InvalidJson, InvalidValue, parse_json


class TokenAuth(HttpBearer):
    """``Authorization: Bearer <token>`` (``manage.py api_token create USERNAME``)."""

    def authenticate(self, request, token: str):
        found = tokens.authenticate(token)
        if found is None:
            return None
        request.user = found.user
        request.api_token = found
        return found


class BodyParser(Parser):
    """Request bodies through the one JSON parser of every face (``parse_json``:
    a duplicate key or a deep nesting is refused, not read last-wins)."""

    def parse_body(self, request):
        return parse_json(request.body)


api = NinjaAPI(
    parser=BodyParser(),
    title="AgentOps API",
    version="1",
    urls_namespace="api-v1",
    auth=TokenAuth(),
    description="Start and follow durable agent runs. See docs/api.md.",
)


def _error(request, status: int, code: str, message: str, errors=None, headers=None):
    response = api.create_response(
        request, {"code": code, "message": message, "errors": errors or {}}, status=status
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _field(loc) -> str:
    """A pydantic error location -> the field name a client knows: ``("body",
    "payload", "budget", "model_calls")`` -> ``budget.model_calls``; query, path and
    header parameters keep their own name."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        source, parts = parts[0], parts[1:]
        if source == "body":
            parts = parts[1:]  # the view's parameter name means nothing to a client
    return ".".join(parts) or "body"


@api.exception_handler(ValidationError)
def _validation(request, exc: ValidationError):
    errors: dict[str, str] = {}
    for item in exc.errors:
        message = item.get("msg", "is not valid")
        if item.get("type") == "extra_forbidden":
            message = "unknown field"
        errors.setdefault(_field(item.get("loc", ())), message)
    return _error(request, 422, "invalid_request", "the request is not valid", errors)


@api.exception_handler(ApiError)
def _api_error(request, exc: ApiError):
    return _error(request, exc.status, exc.code, exc.message, exc.errors, exc.headers)


@api.exception_handler(ControlError)
def _control_error(request, exc: ControlError):
    return _api_error(request, from_control(exc))


@api.exception_handler(InvalidValue)
def _invalid_value(request, exc: InvalidValue):
    # Raised before any SQL was sent, inside the view's transaction: nothing is stored.
    return _error(request, 422, "invalid_input", exc.detail, {exc.field(): exc.reason})


@api.exception_handler(AuthenticationError)
def _unauthorized(request, exc):
    return _error(
        request,
        401,
        "unauthorized",
        "a valid API token is required (Authorization: Bearer <token>)",
        headers={"WWW-Authenticate": "Bearer"},
    )


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    if exc.status_code == 400:
        # ninja wraps what the body parser raised; its reason is the useful part.
        why = f": {exc.__cause__}" if isinstance(exc.__cause__, InvalidJson) else ""
        return _error(request, 400, "invalid_json", f"the request body is not valid JSON{why}")
    return _error(request, exc.status_code, "http_error", str(exc))


@api.exception_handler(Http404)
def _not_found(request, exc):
    return _error(request, 404, "not_found", "not found")


@api.exception_handler(PermissionDenied)
def _forbidden(request, exc):
    return _error(request, 403, "permission_denied", str(exc) or "permission denied")


api.add_decorator(refuse_ignored_input, mode="view")
api.add_router("/", runs.router)
api.add_router("/", replays.router)
api.add_router("/", approvals.router)
api.add_router("/", stream.router)
api.add_router("/", signals.router)
api.add_router("/", signals.hooks_router)
api.add_router("/", deferred_calls.router)
api.add_router("/", schedules.router)
