"""Signal endpoints: ``POST /runs/{id}/signals/{name}`` for token holders (the body is
the payload; idempotent with ``Idempotency-Key``, which is also the signal's request
id), and ``POST /hooks/{hook}`` for outside systems without user tokens: a named hook
with its own secret (``AGENTOPS_SIGNAL_HOOKS``), an HMAC-SHA256 signature over the
timestamp and the body, the run found by a correlation key taken from the body.
An unsigned, badly signed or stale call is 401 and recorded as a refused action."""

import hashlib
import hmac
import logging
import time
from typing import Any, NoReturn
from uuid import UUID

from django.conf import settings
from django.db import DatabaseError
from ninja import Router, Schema

from runs.api import access
from runs.api.conditional import conditional_action
from runs.api.errors import ApiError, error_responses, from_control
from runs.engine.service import ControlError, InvalidJson, deliver_signal, parse_json
from runs.models import RefusedAction, Run

logger = logging.getLogger("agentops.api")

router = Router(tags=["signals"])
hooks_router = Router(tags=["signals"], auth=None)

#: The header carrying ``t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>``.
SIGNATURE_HEADER = "X-AgentOps-Signature"


class SignalOut(Schema):
    """What a delivery did: ``consumed`` when the waiting step took the signal (else it
    is kept until the run waits for it); ``duplicate`` when this request id delivered it
    before; ``run_status`` after the delivery."""

    signal: str
    request_id: str
    run_id: str
    consumed: bool
    duplicate: bool
    step: int | None
    run_status: str


def _body_json(request) -> Any:
    if not request.body.strip():
        return {}
    try:
        return parse_json(request.body)
    except InvalidJson as exc:
        raise ApiError(400, exc.code, f"the request body is not valid JSON: {exc}") from None


def _answer(run_id, delivery) -> dict[str, Any]:
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    return {**delivery.as_dict(), "run_status": status}


@router.post(
    "/runs/{run:run_id}/signals/{name}",
    response={200: SignalOut, **error_responses()},
    summary="Deliver a signal (the body is its JSON payload)",
    openapi_extra={
        "requestBody": {
            "content": {"application/json": {"schema": {}}},
            "description": "The payload, checked against the waiting step's schema.",
        }
    },
)
@conditional_action(precondition=False)
def signal_run(request, run_id: UUID, name: str):
    """The run takes the signal if it waits for ``name``, else keeps it for its next
    wait. 422 ``invalid_input`` (payload against the schema: nothing changes) or
    ``unknown_signal``; 409 ``run_terminal``; 403 for a run the token may only read."""
    run = access.get_run_to_operate(request.user, run_id)
    delivery = deliver_signal(
        run.pk,
        name,
        _body_json(request),
        request_id=request.headers.get("Idempotency-Key"),
        actor=access.actor(request.user),
    )
    return _answer(run.pk, delivery)


@hooks_router.post(
    "/hooks/{hook}",
    response={200: SignalOut, **error_responses()},
    summary="Deliver a signal from an outside system (signed, no token)",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": {}}}}},
)
def hook(request, hook: str):
    """Checks ``X-AgentOps-Signature`` against the hook's secret (401
    ``invalid_signature``, recorded as a refused action), finds the run by the hook's
    correlation field in the body (404 ``unknown_run``) and delivers the hook's signal
    with the body (or its ``payload_field``) as payload. The request id is the body's
    ``request_id_field`` when the hook names one, else the body's sha256: a repeated
    call delivers once."""
    config = settings.AGENTOPS_SIGNAL_HOOKS.get(hook)
    if config is None:
        _refuse(request, hook, "unknown_hook", f"no hook {hook!r}")
    problem = signature_problem(
        config["secret"], request.headers.get(SIGNATURE_HEADER, ""), request.body
    )
    if problem is not None:
        _refuse(request, hook, "invalid_signature", problem)
    body = _body_json(request)
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_input", "the body must be a JSON object", {"body": "object"})
    key = body.get(config["field"])
    if not isinstance(key, str) or not key.strip():
        raise ApiError(
            422,
            "invalid_input",
            f"the body has no correlation key {config['field']!r}",
            {config["field"]: "required"},
        )
    run = _correlated_run(config["by"], key)
    payload = body.get(config["payload_field"], {}) if config.get("payload_field") else body
    field = config.get("request_id_field")
    request_id = str(body.get(field, "")) if field else ""
    if not request_id.strip():
        request_id = hashlib.sha256(request.body).hexdigest()
    try:
        delivery = deliver_signal(
            run.pk, config["signal"], payload, request_id=request_id, actor=f"hook:{hook}"
        )
    except ControlError as exc:
        raise from_control(exc) from None
    return _answer(run.pk, delivery)


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The ``X-AgentOps-Signature`` value for ``body`` at ``timestamp`` (unix seconds,
    default now): what a sender computes."""
    stamp = int(time.time()) if timestamp is None else int(timestamp)
    digest = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={stamp},v1={digest}"


def signature_problem(secret: str, header: str, body: bytes) -> str | None:
    """Why ``header`` does not sign ``body`` with ``secret`` (missing, malformed, stale
    beyond ``AGENTOPS_HOOK_TOLERANCE_SECONDS`` either way, or wrong), or ``None``."""
    if not header:
        return f"unsigned: no {SIGNATURE_HEADER} header"
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    stamp, given = parts.get("t", ""), parts.get("v1", "")
    if not stamp.isdigit() or not given:
        return f"{SIGNATURE_HEADER} must be t=<unix seconds>,v1=<hex>"
    if abs(time.time() - int(stamp)) > settings.AGENTOPS_HOOK_TOLERANCE_SECONDS:
        return "the signature's timestamp is too old (or in the future)"
    expected = sign(secret, body, int(stamp)).split("v1=", 1)[1]
    if not hmac.compare_digest(expected, given):
        return "the signature does not match the body"
    return None


def _correlated_run(by: str, key: str) -> Run:
    """The run ``key`` names: its id (``by="run"``) or its thread's id (``"thread"``,
    the thread's latest run)."""
    try:
        runs = (
            Run.objects.filter(pk=UUID(key))
            if by == "run"
            else Run.objects.filter(thread__thread_id=key)
        )
    except ValueError:
        runs = Run.objects.none()
    run = runs.order_by("-created_at").first()
    if run is None:
        raise ApiError(404, "unknown_run", f"no run for correlation key {key!r}")
    return run


def _refuse(request, hook: str, code: str, reason: str) -> NoReturn:
    """Record the refused call (actor ``hook:<name>``) and answer 401."""
    try:
        RefusedAction.objects.create(
            actor=f"hook:{hook}"[:200],
            channel="webhook",
            action=f"{request.method} {request.path}"[:300],
            target=hook[:200],
            status_code=401,
            code=code,
            reason=reason[:2000],
        )
    except DatabaseError:
        # The refusal stands; its audit row waits for no database.
        logger.exception("could not record a refused hook call")
    raise ApiError(401, code, reason)
