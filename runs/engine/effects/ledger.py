"""The operation ledger: side effects recorded as intent before the call and result
after it.

Idempotency keys are ``<run id>:g<generation>:<step>:<action>``, with ``#<n>`` appended
for the call at position ``n`` (0-based) among the step's calls of that action, so the
first call keeps the key older versions gave every call: stable across attempts and
lease reclaims of one business action, distinct for each call of a step, across runs
and across resumed generations (a resume from an earlier checkpoint is a new decision
to act again). A branch of a map step names its step with its position
(``ledger.step_scope``: ``fetch[3]``). Compensations use ``<key of the step>:compensate:<action>``.

A recorded row answers only the request it recorded: before its result is reused (or an
unsettled call verified), the tool and the arguments are compared with it
(``check_same_request``).

Operation statuses: INTENT (the call may be in flight, or its caller died: unknown until
verified), SUCCEEDED (result recorded), FAILED (known not to have taken effect: the tool
reported an error, verify said "not done", or an operator resolved "not done"; a later
attempt may re-intend it under the same key), UNKNOWN (verify could not tell; a human
decides), COMPENSATED (undone by a compensation).
"""

from collections.abc import Callable
from typing import Any, Protocol

from django.db import IntegrityError, transaction

from runs.engine.data import payloads
from runs.engine.effects.calls import CallTimedOut, call_with_timeout
from runs.engine.errors import LeaseLost, NonDeterminism, StepError
from runs.engine.state import reconnect
from runs.engine.state.gateway import (
    attempt_holds_operation,
    record_event,
    transition_operation,
    transition_operations,
)
from runs.engine.state.values import InvalidValue, storable, storable_text
from runs.models import Operation, Step
from runs.tools import Tool, ToolCall, VerifyAnswer


class LedgerTool(Protocol):
    """What the ledger records of the thing called: a ``Tool``, or a model request."""

    @property
    def name(self) -> str: ...
    @property
    def side_effect(self) -> str: ...


#: ``side_effect`` values of operations that change nothing outside: reads, and model
#: requests (``runs.engine.effects.model_calls``), which only cost. Compensation, resume
#: previews and unknown-outcome checks leave them out.
NO_OUTSIDE_EFFECT = ("read", "model")

#: Statuses from which a new attempt may record a fresh intent under the same key.
REINTENDABLE = (Operation.Status.INTENT, Operation.Status.FAILED, Operation.Status.UNKNOWN)


def key_prefix(run_id, generation: int) -> str:
    """The part of every key that names the run and its generation."""
    return f"{run_id}:g{generation}:"


def step_scope(step: Step) -> str:
    """The step part of the keys of ``step``'s calls: its name, and for a branch of a
    map step also its position (``fetch[3]``), so each branch keys its calls apart from
    its siblings' and the same way in every attempt."""
    if step.position is None:
        return step.name
    return f"{step.name}[{step.position}]"


def idempotency_key(run_id, generation: int, step_name: str, action: str, position: int = 0) -> str:
    """The ledger key of one business action: call ``position`` (0-based) of ``action``
    within the step (see the module docstring)."""
    return positioned(f"{key_prefix(run_id, generation)}{step_name}:{action}", position)


def positioned(key: str, position: int) -> str:
    """``key`` for the call at ``position`` (0-based) among the calls made under it by
    one execution of a step: ``key`` itself for the first, ``key#<n>`` after it."""
    return key if position == 0 else f"{key}#{position}"


class CallPositions:
    """Counts the calls one execution of a step (or one compensation) makes under each
    base key, so that each gets its own key (``positioned``) and a re-execution that
    makes the same calls in the same order finds each one's record."""

    def __init__(self) -> None:
        self._taken: dict[str, int] = {}

    def key_for(self, base: str) -> str:
        """The key of the next call under ``base``."""
        position = self._taken.get(base, 0)
        self._taken[base] = position + 1
        return positioned(base, position)


def same_request(op: Operation, tool_name: str, arguments: dict, *, ignore=()) -> bool:
    """Whether ``op`` recorded a call of ``tool_name`` with ``arguments`` (compared as
    stored: JSON, NUL escaped), leaving out the top-level keys in ``ignore``."""
    try:
        now = storable(arguments, "tool arguments")
    except InvalidValue:
        return False
    recorded = op.arguments if isinstance(op.arguments, dict) else {}
    return op.tool == tool_name and _without(now, ignore) == _without(recorded, ignore)


def _without(arguments: dict, ignore) -> dict:
    return {k: v for k, v in arguments.items() if k not in ignore}


def check_same_request(
    op: Operation, tool_name: str, arguments: dict, *, action: str, ignore=()
) -> None:
    """Raise ``NonDeterminism`` (naming the call and both requests) unless ``op``
    recorded this request (``same_request``)."""
    if same_request(op, tool_name, arguments, ignore=ignore):
        return
    raise NonDeterminism(
        op.idempotency_key,
        action=action,
        recorded={"tool": op.tool, "arguments": op.arguments},
        now={"tool": tool_name, "arguments": arguments},
    )


def find(key: str) -> Operation | None:
    """The ledger row for ``key``, if any."""
    return Operation.objects.filter(idempotency_key=key).first()


def record_intent(
    *,
    run_id,
    step_id: int | None,
    attempt: int | None,
    key: str,
    tool: LedgerTool,
    arguments: dict,
    before_write: Callable[[], None] | None = None,
) -> Operation:
    """Create the INTENT row for ``key``, or turn an earlier INTENT/FAILED/UNKNOWN row
    back into an INTENT of this attempt, fenced by ``attempt``.

    ``attempt=None`` skips the fence (compensations run under their own lease, not a
    step's). Returns the row as stored; a row already SUCCEEDED or COMPENSATED is
    returned unchanged so the caller reuses it. ``before_write()`` runs in the same
    transaction right before the INTENT is written, never for a row returned unchanged
    (a model request's budget charge: a reused reply is not charged); what it raises
    propagates and nothing is written. Raises ``LeaseLost`` if ``attempt`` no longer
    holds the step, ``InvalidValue`` (before any call) if ``arguments`` cannot be stored
    faithfully.
    """
    arguments = storable(arguments, "tool arguments")
    with transaction.atomic():
        if attempt is None:
            op = find(key)
        else:
            holds, op_id = (False, None)
            if step_id is not None:
                holds, op_id = attempt_holds_operation(step_id, attempt, key)
            if not holds:
                raise LeaseLost(f"step {step_id} attempt {attempt} no longer holds the lease")
            # The fence's statement found the row's id: read the row only when there is one.
            op = None if op_id is None else Operation.objects.filter(pk=op_id).first()
        if op is not None and op.status not in REINTENDABLE:
            return op
        if before_write is not None:
            before_write()
        if op is None:
            try:
                # A savepoint: a concurrent insert of the same key must not abort the
                # whole transaction (the row is read back below).
                with transaction.atomic():
                    return Operation.objects.create(
                        idempotency_key=key,
                        run_id=run_id,
                        step_id=step_id,
                        tool=tool.name,
                        side_effect=tool.side_effect,
                        arguments=arguments,
                        attempt=attempt or 0,
                    )
            except IntegrityError:
                op = find(key)
                if op is None:
                    raise  # another constraint than the key's
                if op.status not in REINTENDABLE:
                    return op
        transition_operation(op, Operation.Status.INTENT, attempt=attempt or 0, arguments=arguments)
        return op


def record_reused(ops: list[Operation], *, run_id, generation: int) -> list[Operation]:
    """Record, for each SUCCEEDED operation in ``ops``, a SUCCEEDED row with the same
    tool, arguments, result and external reference under the same business action's key
    in ``run_id``'s ``generation`` (``reused_from`` the original), so that work done
    again from a checkpoint reuses the result instead of calling again
    (``runs.engine.control.reuse``). Keys that do not have the ledger's shape are
    skipped. Returns the new rows."""
    rows = []
    for op in ops:
        old = key_prefix(op.run_id, op.step.generation if op.step else 1)
        if op.status != Operation.Status.SUCCEEDED or not op.idempotency_key.startswith(old):
            continue
        rows.append(
            Operation(
                run_id=run_id,
                idempotency_key=key_prefix(run_id, generation) + op.idempotency_key[len(old) :],
                tool=op.tool,
                side_effect=op.side_effect,
                arguments=op.arguments,
                status=Operation.Status.SUCCEEDED,
                result=payloads.externalize(run_id, op.result),
                external_ref=op.external_ref,
                reused_from=op,
            )
        )
    return Operation.objects.bulk_create(rows)


def decline_reuse(op: Operation, tool_name: str, arguments: dict) -> bool:
    """For a row carried over by ``record_reused``, asked for again by another tool or
    with ``arguments`` that differ from the recorded ones (``same_request``): remove the
    copy, so this call records its own intent and acts, and return True. The recorded
    result answered another request; reusing it would silently skip what the step now
    asks for. False (row kept) for a row of this run's own making or the same request."""
    if op.reused_from_id is None or op.status != Operation.Status.SUCCEEDED:
        return False
    if same_request(op, tool_name, arguments):
        return False
    Operation.objects.filter(pk=op.pk, reused_from__isnull=False).delete()
    return True


def record_result(op: Operation, result, *, status: str = Operation.Status.SUCCEEDED) -> None:
    """Store the outcome of the call. Not fenced on purpose: what the outside world did is
    a fact worth keeping even when it comes from an attempt that lost its lease. A busy
    or lost database is waited out (``reconnect.retry_write``, up to one lease) rather
    than leaving the outcome unknown; inside an enclosing transaction the error
    propagates to its owner, which retries the whole of it.

    A result that cannot be stored faithfully is kept as its ``repr`` with the reason
    (the effect happened: the row must say so), then ``InvalidValue`` is raised so the
    attempt fails once with the cause."""
    try:
        result = storable(result, "tool result")
    except InvalidValue:
        _store_result(op, {"invalid_result": storable_text(repr(result)[:4000])}, status)
        raise
    _store_result(op, result, status)


def record_failure(op: Operation, exc: StepError) -> None:
    """Store ``op`` FAILED with the ``StepError`` that said the effect did not happen:
    ``{"error_code", "detail"}`` (the detail's first 2000 characters). Raises what
    ``record_result`` raises."""
    record_result(
        op,
        {"error_code": exc.code, "detail": exc.detail[:2000]},
        status=Operation.Status.FAILED,
    )


def _store_result(op: Operation, result, status: str) -> None:
    reconnect.retry_write(
        lambda: transition_operation(op, status, result=payloads.externalize(op.run_id, result)),
        what=f"result of operation {op.pk}",
    )
    op.result = result


def record_late_result(op_id: int, result) -> None:
    """A call abandoned after its timeout finished after all: record the result unless a
    decision (verify, an operator) already settled the row. A result that cannot be
    stored faithfully is kept as its ``repr``."""
    try:
        result = storable(result, "tool result")
    except InvalidValue as exc:
        result = {"invalid_result": storable_text(repr(result)[:4000]), "problem": exc.detail}
    reconnect.retry_write(
        lambda: _store_late_result(op_id, result), what=f"late result of operation {op_id}"
    )


def _store_late_result(op_id: int, result) -> None:
    run_id = Operation.objects.filter(pk=op_id).values_list("run_id", flat=True).first()
    if run_id is None:
        return
    transition_operations(
        Operation.objects.filter(
            pk=op_id, status__in=[Operation.Status.INTENT, Operation.Status.UNKNOWN]
        ),
        Operation.Status.SUCCEEDED,
        result=payloads.externalize(run_id, result),
    )


def call(tool: Tool, arguments: dict, call_info: ToolCall):
    """Invoke the tool implementation (outside any transaction)."""
    return tool.fn(arguments, call_info)


def verify(
    tool: Tool, op: Operation, call_info: ToolCall, *, timeout: float | None = None
) -> VerifyAnswer:
    """Ask the tool's ``verify`` hook what became of ``op``; never raises.

    No hook, a hook that raises or takes longer than ``timeout`` seconds (default: the
    tool's ``timeout``; ``None``: no limit), or an answer of the wrong type all mean
    "cannot tell".
    """
    if tool.verify is None:
        return VerifyAnswer("cannot_tell", evidence=f"tool {tool.name} has no verify hook")
    hook = tool.verify
    try:
        answer = call_with_timeout(
            lambda: hook(op.arguments, call_info), tool.timeout if timeout is None else timeout
        )
    except CallTimedOut as exc:
        return VerifyAnswer("cannot_tell", evidence=f"verify {exc}")
    except Exception as exc:  # noqa: BLE001 - any failure to look is "cannot tell"
        return VerifyAnswer("cannot_tell", evidence=f"verify failed: {type(exc).__name__}: {exc}")
    if not isinstance(answer, VerifyAnswer):
        return VerifyAnswer("cannot_tell", evidence=f"verify returned {answer!r}")
    return answer


def record_verified(
    op: Operation, answer: VerifyAnswer, *, step_id: int | None, actor: str, **details: Any
) -> None:
    """Record the ``operation.verified`` event on ``op``'s run: the operation as
    ``describe`` gives it, the ``answer`` (``done``/``not_done``/``cannot_tell``) and its
    evidence (first 2000 characters), then ``details`` (e.g. ``after``: the failure that
    led to asking, or ``requested_by``)."""
    payload = {
        **describe(op),
        "answer": answer.status,
        "evidence": answer.evidence[:2000],
        **details,
    }
    reconnect.retry_write(
        lambda: record_event(
            op.run_id, "operation.verified", payload, step_id=step_id, actor=actor
        ),
        what=f"verify answer of operation {op.pk}",
    )


def describe(op: Operation) -> dict[str, Any]:
    """The operation as shown in takeovers and events."""
    return {
        "id": op.pk,
        "tool": op.tool,
        "side_effect": op.side_effect,
        "idempotency_key": op.idempotency_key,
        "arguments": op.arguments,
        "status": op.status,
        "attempt": op.attempt,
    }
