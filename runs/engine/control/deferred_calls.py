"""Deliver an outside system's result for a tool call an agent deferred (Pydantic AI's
``CallDeferred``).

An agent workflow whose tool defers its call waits in WAITING_EXTERNAL on its
``deliver`` step, a wait for the signal ``tool_result`` (``runs.engine.control.waits``),
so a delivery is a signal delivery: the same move, the same idempotency by request id,
the same deadline and timeout route. What this adds is the check that the call is one
the run waits for, so a wrong id is refused with the ids it could be, never kept.
"""

from typing import Any

from runs.engine.control.waits import Delivery, deliver_signal
from runs.engine.errors import ControlError
from runs.engine.state import checkpoints
from runs.models import Run

#: The signal an agent workflow's ``deliver`` step waits for; its payload is
#: ``{"tool_call_id": str, "result": JSON}``.
TOOL_RESULT_SIGNAL = "tool_result"


def waiting_calls(run: Run) -> list[dict[str, Any]]:
    """The deferred tool calls ``run`` still waits for, ``[{id, name, arguments}]``,
    from its latest checkpoint (empty when it waits for none)."""
    outputs = checkpoints.latest_state(run).get("outputs", {})
    states = [s for s in outputs.values() if isinstance(s, dict) and "deferred_ids" in s]
    if not states:
        return []
    state = max(states, key=lambda s: s.get("turn", 0))
    delivered = state.get("delivered") or {}
    return [c for c in state.get("deferred", []) if c["id"] not in delivered]


def deliver_tool_result(
    run_id, call_id: str, result: Any, *, actor: str, request_id: str | None = None
) -> Delivery:
    """Deliver ``result`` (JSON) for the deferred tool call ``call_id`` of the run
    ``run_id`` as ``actor``; ``request_id`` makes a repeat deliver nothing new. Returns
    the ``Delivery``. Raises ``ControlError``: ``invalid_input`` when the run waits for
    no such call (the error names the calls it waits for), and what
    ``deliver_signal`` raises (``run_terminal``, ``signal_conflict``, ...);
    ``Run.DoesNotExist`` for an unknown run."""
    run = Run.objects.get(pk=run_id)
    waiting = waiting_calls(run)
    if call_id not in {c["id"] for c in waiting}:
        known = ", ".join(f"{c['id']} ({c['name']})" for c in waiting) or "none"
        raise ControlError(
            "invalid_input",
            f"run {run.pk} waits for no deferred tool call {call_id!r}; it waits for: {known}",
            {"call": "not a deferred call of this run"},
        )
    return deliver_signal(
        run.pk,
        TOOL_RESULT_SIGNAL,
        {"tool_call_id": call_id, "result": result},
        request_id=request_id,
        actor=actor,
    )
