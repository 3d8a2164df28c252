"""Which recorded side effects a resume or a replay reuses.

Doing work again from a checkpoint (a resume in a new generation, or a replay as a new
run) must not repeat an outside effect that already happened: by default every
operation recorded SUCCEEDED by the steps after the checkpoint is carried over into the
new keys, so the step that asks for the same business action (same step, same action
name: the idempotency key without its run and generation) gets the recorded result and
the outside world is not called again. A copy answers only the same arguments: asked
with others (or by another tool), the ledger drops it and the call is made
(``ledger.decline_reuse``).
Re-executing them all is an explicit choice with a reason (``reexecute=True``),
recorded on the event that starts the work.

Reads are not carried over: they have no effect to repeat, and work done again after a
fix or an outage should see fresh values. Model requests are not either (their keys
name the step execution, and a replay after a fix should ask again); nor compensations:
they belong to the run that undid something.
"""

from collections.abc import Iterable
from typing import Any

from django.db.models import QuerySet

from runs.engine.effects import ledger
from runs.engine.effects.model_calls import MODEL_KIND
from runs.engine.errors import ControlError
from runs.models import Operation, Step

#: Operation statuses whose effect may have happened and has no recorded result to reuse.
_MAY_REPEAT = (Operation.Status.INTENT, Operation.Status.UNKNOWN, Operation.Status.COMPENSATED)


#: Operation kinds that are not effects on the outside world.
NOT_EFFECTS = ("read", MODEL_KIND)


#: Steps as a list or as a queryset (a subquery: a resume's 10,000 branches are not
#: loaded to name them).
Steps = Iterable[Step] | QuerySet[Step]


def _effects(steps: Steps):
    chosen: QuerySet[Step] | list[int] = (
        steps if isinstance(steps, QuerySet) else [s.pk for s in steps]
    )
    return (
        Operation.objects.filter(step__in=chosen)
        .exclude(side_effect__in=NOT_EFFECTS)
        .exclude(idempotency_key__contains=":compensate:")
        .select_related("step")
        .order_by("pk")
    )


def reusable(steps: Steps) -> list[Operation]:
    """The operations of ``steps`` a reuse carries over: SUCCEEDED, not reads, not model
    requests, not compensations, oldest first."""
    return [op for op in _effects(steps) if op.status == Operation.Status.SUCCEEDED]


def may_repeat(steps: Steps, *, reexecute: bool) -> list[Operation]:
    """The operations of ``steps`` whose effect may happen again: those with no result
    to reuse (INTENT, UNKNOWN, COMPENSATED), plus the SUCCEEDED ones when
    ``reexecute``."""
    statuses = (*_MAY_REPEAT, Operation.Status.SUCCEEDED) if reexecute else _MAY_REPEAT
    return [op for op in _effects(steps) if op.status in statuses]


def describe(op: Operation, *, with_result: bool = True) -> dict[str, Any]:
    """An operation as the previews list it: ``{"id", "step", "tool", "side_effect",
    "status", "idempotency_key", "arguments", "result", "external_ref"}`` (``result``
    only ``with_result``)."""
    row = {
        "id": op.pk,
        "step": op.step.name if op.step else None,
        "tool": op.tool,
        "side_effect": op.side_effect,
        "status": op.status,
        "idempotency_key": op.idempotency_key,
        "arguments": op.arguments,
        "external_ref": op.external_ref,
    }
    if with_result:
        row["result"] = op.result
    return row


def check_choice(reexecute: bool, reason: str) -> None:
    """Re-executing recorded side effects needs a reason; raises ``ControlError``
    ``reason_required`` without one."""
    if reexecute and not (reason or "").strip():
        raise ControlError(
            "reason_required",
            "re-executing recorded side effects needs a reason",
            {"reason": "say why the recorded side effects must happen again"},
        )


def carry_over(ops: list[Operation], *, run_id, generation: int) -> list[Operation]:
    """Carry each SUCCEEDED operation in ``ops`` over into ``run_id``'s ``generation``
    (``ledger.record_reused``), under the key the step doing the same business action
    will ask for. Call it inside the transaction that starts the new work. Returns the
    new rows."""
    return ledger.record_reused(
        [op for op in ops if op.status == Operation.Status.SUCCEEDED],
        run_id=run_id,
        generation=generation,
    )
