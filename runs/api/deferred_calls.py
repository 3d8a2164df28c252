"""``POST /runs/{id}/tool-calls/{call_id}/result``: deliver an outside system's result
for a tool call an agent deferred (``CallDeferred``). The body is the result (any
JSON); idempotent with ``Idempotency-Key``, which is also the delivery's request id."""

from typing import Any
from uuid import UUID

from ninja import Router

from runs.api import access
from runs.api.conditional import conditional_action
from runs.api.errors import ApiError, error_responses
from runs.api.signals import SignalOut
from runs.engine.service import InvalidJson, deliver_tool_result, parse_json
from runs.models import Run

router = Router(tags=["signals"])


def _result(request) -> Any:
    try:
        return parse_json(request.body)
    except InvalidJson as exc:
        raise ApiError(400, exc.code, f"the request body is not valid JSON: {exc}") from None


@router.post(
    "/runs/{run:run_id}/tool-calls/{call_id}/result",
    response={200: SignalOut, **error_responses()},
    summary="Deliver the outside result of a deferred tool call (the body is the result)",
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": {}}}}},
)
@conditional_action(precondition=False)
def deliver_result(request, run_id: UUID, call_id: str):
    """The run's ``deliver`` step takes the result and the agent goes on. 422
    ``invalid_input`` when the run waits for no such call (nothing changes); 409
    ``run_terminal``; 403 for a run the token may only read."""
    run = access.get_run_to_operate(request.user, run_id)
    delivery = deliver_tool_result(
        run.pk,
        call_id,
        _result(request),
        request_id=request.headers.get("Idempotency-Key"),
        actor=access.actor(request.user),
    )
    status = Run.objects.filter(pk=run.pk).values_list("status", flat=True).first()
    return {**delivery.as_dict(), "run_status": status}
