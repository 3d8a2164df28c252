"""Preconditions and idempotency for every state-changing API action, in one decorator.

``@conditional_action()`` under ``@router.post(...)`` adds two documented headers to the
operation:

- ``If-Match`` (required): the run's ``ETag`` as read from ``GET /runs/{id}`` (or from the
  previous action's response). The action applies only if the run still has that tag,
  checked under the run's row lock (``runs.engine.control.preconditions``): of
  concurrent requests with one tag exactly one proceeds, the others get 409
  ``run_changed``. Missing: 422 ``invalid_request`` naming ``If-Match``.
- ``Idempotency-Key`` (optional): the same key with the same request replays the first
  response (header ``Idempotent-Replayed: true``), also while that first request is
  still running (the duplicate waits for it); the same key with another request is 422
  ``idempotency_key_reused``.

Successful responses carry the run's new ``ETag``.
"""

import inspect
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from ninja import Header, Status
from ninja.responses import NinjaJSONEncoder
from pydantic_core import to_jsonable_python

from runs.api.errors import ApiError, from_control
from runs.engine.service import (
    MAX_REQUEST_ID_CHARS,
    ControlError,
    InvalidJson,
    await_response,
    claim_action,
    expect_run_etag,
    finish_action,
    parse_if_match,
    parse_json,
    release_action,
    request_fingerprint,
    request_id_problem,
    run_etag,
)
from runs.models import Run

#: Seconds a duplicate request waits for the first one with its key to answer.
DUPLICATE_WAIT_SECONDS = 30

IF_MATCH_DOC = (
    "The run's ETag (from GET /runs/{id} or the last action's response). The "
    "action applies only if the run has not changed since; otherwise 409 run_changed."
)
KEY_DOC = (
    f"Optional, 1..{MAX_REQUEST_ID_CHARS} printable ASCII. A retry with the same key "
    "and request gets the first response again (Idempotent-Replayed: true); with "
    "another request, 422 idempotency_key_reused."
)


def check_idempotency_key(key: str | None) -> None:
    """Raise a 422 ``invalid_idempotency_key`` ``ApiError`` for a malformed key."""
    if key is not None and request_id_problem(key, header=True) is not None:
        raise ApiError(
            422,
            "invalid_idempotency_key",
            f"Idempotency-Key must be 1..{MAX_REQUEST_ID_CHARS} printable ASCII characters",
            {"Idempotency-Key": f"1..{MAX_REQUEST_ID_CHARS} printable ASCII"},
        )


def as_api_error(exc: Exception) -> ApiError | None:
    """The ``ApiError`` an exception answers as, or ``None`` for a server error."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ControlError):
        return from_control(exc)
    if isinstance(exc, PermissionDenied):
        return ApiError(403, "permission_denied", str(exc) or "permission denied")
    if isinstance(exc, Http404):
        return ApiError(404, "not_found", "not found")
    return None


def _run_id_param(kwargs: dict[str, Any]):
    return kwargs.get("run_id")


def conditional_action(
    run_of: Callable[[dict[str, Any]], Any] = _run_id_param,
    *,
    precondition: bool = True,
) -> Callable[[Callable], Callable]:
    """Decorate a state-changing API view (see the module docstring). ``run_of(kwargs)``
    gives the id of the run the action changes from the view's parameters (default:
    ``run_id``); ``None`` (no such object) leaves the view to answer 404.
    ``precondition=False`` is for an action on no single run (a bulk action over a
    selection): it takes ``Idempotency-Key`` only, no ``If-Match``."""

    def decorator(view: Callable) -> Callable:
        signature = inspect.signature(view)
        params = list(signature.parameters.values())
        response_param = next((p.name for p in params if p.annotation is HttpResponse), None)
        extra = [
            inspect.Parameter(
                "idempotency_key",
                inspect.Parameter.KEYWORD_ONLY,
                default=Header(None, alias="Idempotency-Key", description=KEY_DOC),
                annotation=str | None,
            ),
        ]
        if precondition:
            extra.insert(
                0,
                inspect.Parameter(
                    "if_match",
                    inspect.Parameter.KEYWORD_ONLY,
                    default=Header(..., alias="If-Match", description=IF_MATCH_DOC),
                    annotation=str,
                ),
            )
        if response_param is None:
            extra.append(
                inspect.Parameter(
                    "response", inspect.Parameter.KEYWORD_ONLY, annotation=HttpResponse
                )
            )

        @wraps(view)
        def wrapper(request, *args, if_match=None, idempotency_key=None, **kwargs):
            response: HttpResponse = kwargs[response_param or "response"]
            if response_param is None:
                kwargs.pop("response")
            try:
                etag = parse_if_match(if_match) if if_match is not None else None
            except ControlError as exc:
                raise from_control(exc) from None
            check_idempotency_key(idempotency_key)
            run_id = run_of(kwargs)
            record = None
            if idempotency_key:
                record, claimed = _claim(request, idempotency_key)
                if not claimed:
                    return _replay(record, response)
            try:
                with expect_run_etag(run_id, etag):
                    result = view(request, *args, **kwargs)
            except Exception as exc:
                refusal = as_api_error(exc)
                if record is not None:
                    if refusal is None:
                        release_action(record)
                    else:
                        stored = finish_action(record, refusal.status, refusal.body())
                        refusal = _stored_refusal(refusal.status, stored, refusal.headers)
                if refusal is None:
                    raise
                raise refusal from None
            tag = _current_etag(run_id)
            if tag:
                response["ETag"] = tag
            if record is not None:
                # The first request answers with the stored body too: every answer to one
                # key is then rendered from the same value, byte for byte.
                stored = finish_action(record, 200, response_body(result), tag)
                return Status(200, stored)
            return result

        # inspect.signature honours __signature__; typeshed's functools._Wrapped omits it.
        wrapper.__signature__ = signature.replace(parameters=params + extra)  # type: ignore[attr-defined]
        return wrapper

    return decorator


def response_body(result: Any) -> Any:
    """``result`` of a view as JSON values, losing nothing the response schema renders:
    times keep their microseconds (``NinjaJSONEncoder`` cuts them to milliseconds, so a
    time with fewer than 1000 microseconds, rendered again from its stored string, would
    lose its ``.000``), decimals stay exact strings."""
    return to_jsonable_python(result, fallback=NinjaJSONEncoder().default)


def _claim(request, key: str):
    try:
        body = parse_json(request.body or b"null")
    except InvalidJson:
        body = request.body.decode(errors="replace")
    fingerprint = request_fingerprint(
        {"method": request.method, "path": request.path, "body": body}
    )
    try:
        record, claimed = claim_action(request.user, key, fingerprint)
    except ControlError as exc:
        raise from_control(exc) from None
    if claimed:
        return record, True
    done = await_response(record, DUPLICATE_WAIT_SECONDS)
    if done is None:
        raise ApiError(
            409,
            "request_in_progress",
            "the first request with this Idempotency-Key is still running; retry later",
            headers={"Retry-After": "1"},
        )
    return done, False


def _replay(record, response: HttpResponse):
    response["Idempotent-Replayed"] = "true"
    if record.etag:
        response["ETag"] = record.etag
    if record.status_code >= 400:
        raise _stored_refusal(record.status_code, record.response, {"Idempotent-Replayed": "true"})
    return Status(record.status_code, record.response)


def _stored_refusal(status: int, body: dict | None, headers: dict[str, str]) -> ApiError:
    """The refusal whose stored body is ``body``: the first request and its replays
    answer from the same stored value."""
    body = body or {}
    return ApiError(
        status, body.get("code", "error"), body.get("message", ""), body.get("errors"), headers
    )


def _current_etag(run_id) -> str:
    if run_id is None:
        return ""
    run = Run.objects.filter(pk=run_id).only("version", "generation", "budget").first()
    return run_etag(run) if run is not None else ""
