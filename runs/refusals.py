"""The audit trail of refused actions: every state-changing request (POST, PUT, PATCH,
DELETE) by a signed-in user or API token that is answered 403 or 409, on the console
and the API alike, becomes a ``RefusedAction`` row with the actor, the target and why.

One middleware sees every such response, so no view has to remember to record it. The
reason comes from the response itself: the API's error body (``code``, ``message``),
the console's refusal page (``refusal_code`` / ``refusal_reason`` set by
``runs.console.access.refusal``), or the ``PermissionDenied`` a view raised.
"""

import json
import logging

from asgiref.sync import sync_to_async
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.utils.deprecation import MiddlewareMixin

from runs.models import RefusedAction

logger = logging.getLogger("agentops.refusals")

AUDITED_STATUS = (403, 409)
STATE_CHANGING = ("POST", "PUT", "PATCH", "DELETE")
#: URL parameters naming what an action targets, in the order they are reported.
TARGET_KINDS = ("run_id", "approval_id", "takeover_id", "step_id", "step_name")


def describe_target(kwargs: dict) -> str:
    """``run:<id> approval:<id> ...`` from a resolved URL's parameters."""
    return " ".join(
        f"{name.removesuffix('_id')}:{kwargs[name]}" for name in TARGET_KINDS if name in kwargs
    )


def _reason(request, response) -> tuple[str, str]:
    if getattr(response, "refusal_code", None) is not None:
        return response.refusal_code, response.refusal_reason
    refused = getattr(request, "_refused_with", None)
    if refused is not None:
        return refused
    if response.get("Content-Type", "").startswith("application/json") and not getattr(
        response, "streaming", False
    ):
        try:
            body = json.loads(response.content)
            return str(body.get("code", "")), str(body.get("message", ""))
        except (ValueError, AttributeError):
            pass
    return "", ""


class RefusalAuditMiddleware(MiddlewareMixin):
    """Record refused state-changing requests (see the module docstring). A failure to
    write the record is logged, never turned into an error for the client. Sync and
    async capable, so the SSE view stays async under ASGI."""

    def process_response(self, request, response):
        if _refused_change(request, response) and _by_someone(request):
            _record(request, response)
        return response

    async def __acall__(self, request):
        # Only a refused change costs a trip to a thread (MiddlewareMixin would run
        # process_response in one for every response). ``request.user`` is lazy: reading
        # it loads the session and the user from the database, which async code may not
        # do, so the whole check runs in the thread.
        # MiddlewareMixin hands an async get_response to __acall__; the stub types it as
        # either kind.
        response = await self.get_response(request)  # type: ignore[misc]
        if _refused_change(request, response):
            await sync_to_async(self.process_response)(request, response)
        return response

    def process_exception(self, request, exception):
        if isinstance(exception, PermissionDenied):
            request._refused_with = ("permission_denied", str(exception) or "permission denied")
        return None


def _refused_change(request, response) -> bool:
    """A 403/409 to a state-changing request (no database access: safe in async code)."""
    return response.status_code in AUDITED_STATUS and request.method in STATE_CHANGING


def _by_someone(request) -> bool:
    """A signed-in user or API token made the request (may query the database)."""
    user = getattr(request, "user", None)
    return user is not None and user.is_authenticated


def _record(request, response) -> None:
    code, reason = _reason(request, response)
    match = request.resolver_match
    try:
        RefusedAction.objects.create(
            actor=f"user:{request.user.get_username()}",
            channel="api" if request.path.startswith("/api/") else "console",
            action=f"{request.method} {request.path}"[:300],
            target=describe_target(match.kwargs if match else {})[:200],
            status_code=response.status_code,
            code=(code or ("forbidden" if response.status_code == 403 else "conflict"))[:64],
            reason=reason[:2000],
        )
    except DatabaseError:
        logger.exception("could not record a refused action")
