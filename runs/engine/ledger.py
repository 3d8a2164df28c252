"""The operation ledger: side effects recorded as intent before the call and result
after it (DESIGN sections 1.2, 1.5, 5.4).

Idempotency keys are ``<run id>:g<generation>:<step>:<action>``: stable across attempts
and worker takeovers of one business action, distinct across runs and across resumed
generations (a resume from an earlier checkpoint is a new decision to act again).
"""

from django.db import transaction
from django.db.models.functions import Now

from runs.engine.errors import LeaseLost
from runs.models import Operation, Step
from runs.states import StepStatus
from runs.tools import Tool, ToolCall


def idempotency_key(run_id, generation: int, step_name: str, action: str) -> str:
    """The ledger key of one business action (see the module docstring)."""
    return f"{run_id}:g{generation}:{step_name}:{action}"


def record_intent(*, run_id, step_id: int, attempt: int, key: str, tool: Tool,
                  arguments: dict) -> Operation:
    """Create (or take over) the INTENT row for ``key``, fenced by ``attempt``.

    Returns the row as stored; a row already SUCCEEDED is returned unchanged so the caller
    reuses its result. Raises ``LeaseLost`` if ``attempt`` no longer holds the step.
    """
    with transaction.atomic():
        if not Step.objects.filter(pk=step_id, attempt=attempt, status=StepStatus.RUNNING).exists():
            raise LeaseLost(f"step {step_id} attempt {attempt} no longer holds the lease")
        op, created = Operation.objects.get_or_create(
            idempotency_key=key,
            defaults={"run_id": run_id, "step_id": step_id, "tool": tool.name,
                      "side_effect": tool.side_effect, "arguments": arguments,
                      "attempt": attempt},
        )
        if not created and op.status == Operation.Status.INTENT:
            Operation.objects.filter(pk=op.pk).update(attempt=attempt, updated_at=Now())
        return op


def record_result(op: Operation, result, *, status: str = Operation.Status.SUCCEEDED) -> None:
    """Store the outcome of the call. Not fenced on purpose: what the outside world did is
    a fact worth keeping even when it comes from an attempt that lost its lease."""
    Operation.objects.filter(pk=op.pk).update(status=status, result=result, updated_at=Now())
    op.status = status
    op.result = result


def call(tool: Tool, arguments: dict, call_info: ToolCall):
    """Invoke the tool implementation (outside any transaction)."""
    return tool.fn(arguments, call_info)
