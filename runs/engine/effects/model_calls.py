"""Model requests through the operation ledger.

A model request is an operation like a tool call: its idempotency key is made from the
run, the generation, the step (name and seq) and the request's ordinal within the step,
its INTENT is recorded before the request and its response (text, tool calls with their
ids, token usage) after it, before the step goes on. An attempt that re-executes the
step after a crash makes the same requests in the same order, so it finds each response
recorded and reuses it: no second charge, no different answer, the same tool-call ids.

Usage: one model call is charged before the request (refused when the budget has no
room left), the tokens and the cost after it, in the transaction that records the
response. The cost comes from the provider when it knows it (the simulator), else from
``AGENTOPS_MODEL_PRICES``; without a price the call counts as unpriced and the run's cost
shows as unknown, never as 0.

A provider's 429 with ``Retry-After`` is not a failure: the request waits for it (as a
call over a rate limit does) and is asked again under the same intent, charged once.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction

from runs.engine import hooks
from runs.engine.effects import budget as budget_mod
from runs.engine.effects import ledger, rate_limits
from runs.engine.effects.calls import CallTimedOut, call_with_timeout, iterate_with_timeout
from runs.engine.effects.model_providers import ModelReply, default_model, get_provider
from runs.engine.effects.retry import retry_after_seconds
from runs.engine.errors import StepError
from runs.engine.state import reconnect
from runs.models import Operation, Run, Step

#: ``Operation.side_effect`` of a model request.
MODEL_KIND = "model"
#: Shortest hold after a provider's 429, in seconds: a ``Retry-After: 0`` answered
#: again and again is asked at most this often.
MIN_PROVIDER_HOLD = 1.0
#: Longest ``Retry-After`` a request waits out in its slot, in seconds, by default: a
#: longer one fails the request into the step's retry policy, so no slot waits that long.
MAX_HELD_WAIT = 30.0
_MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class LedgerTarget:
    """What the ledger records as the operation's ``tool`` and ``side_effect``."""

    name: str
    side_effect: str = MODEL_KIND


def model_key(run_id, step: Step, ordinal: int) -> str:
    """The idempotency key of request ``ordinal`` (0-based) of one execution of ``step``."""
    return ledger.idempotency_key(
        run_id, step.generation, f"{ledger.step_scope(step)}.{step.seq}", f"model.{ordinal}"
    )


def model_name_for(workflow, step_def, override: str | None = None) -> str:
    """The model a step asks: ``override``, else the step's ``model``, else the
    workflow's, else the default (``model_providers.default_model``). Raises
    ``ModelNotConfigured`` when none is named and there is no default."""
    return (
        override
        or getattr(step_def, "model", None)
        or getattr(workflow, "model", None)
        or default_model()
    )


def price_usd(model_name: str, usage: dict[str, int]) -> Decimal | None:
    """The cost of ``usage`` at ``AGENTOPS_MODEL_PRICES[model_name]`` (USD per million
    input and output tokens), or ``None`` when the model has no price."""
    price = settings.AGENTOPS_MODEL_PRICES.get(model_name)
    if price is None:
        return None
    return (
        Decimal(str(price["input"])) * int(usage.get("input_tokens") or 0)
        + Decimal(str(price["output"])) * int(usage.get("output_tokens") or 0)
    ) / _MILLION


def request(
    *,
    run: Run,
    step: Step,
    attempt: int,
    actor: str,
    ordinal: int,
    model_name: str,
    summary: dict[str, Any],
    call: Callable[[], ModelReply],
    timeout: float | None = None,
    cost_per_call_usd: str | None = None,
    check: Callable[[], None] | None = None,
    max_held_wait: float = MAX_HELD_WAIT,
) -> tuple[ModelReply, bool]:
    """Request ``ordinal`` of this step execution through the ledger; returns ``(reply,
    reused)``. ``call()`` asks the model (outside any transaction); ``summary`` (JSON)
    is recorded as the operation's arguments. ``cost_per_call_usd``: a price the provider
    knows in advance, charged with the call. ``check()`` is called while the request
    waits for a rate limit (``rate_limits``) and may raise to end the wait.

    A recorded reply is reused only for the same model and ``summary``; another one
    raises ``NonDeterminism``. Raises ``BudgetExhausted`` (nothing asked), ``LeaseLost``
    (the intent's fence),
    ``StepError`` from ``call`` (the operation is FAILED: a retry asks again) or
    ``StepError("TIMEOUT")`` past ``timeout`` seconds. A ``RATE_LIMITED`` answer with
    ``Retry-After`` holds the provider's name that long (at least ``MIN_PROVIDER_HOLD``)
    for every worker; when it asks for at most ``max_held_wait`` seconds it raises
    nothing: this request waits and is asked again once the hold passed, under the same
    operation and idempotency key, in the same attempt (a longer one raises as above).
    """
    key = model_key(run.pk, step, ordinal)
    arguments = {"model": model_name, "ordinal": ordinal, **summary}
    # One transaction reads the ledger, charges the call (a recorded reply is reused
    # uncharged) and writes the intent.
    op = ledger.record_intent(
        run_id=run.pk,
        step_id=step.pk,
        attempt=attempt,
        key=key,
        tool=LedgerTarget(model_name),
        arguments=arguments,
        before_write=lambda: budget_mod.charge(
            run.pk,
            run.budget,
            parent_run_id=run.parent_run_id,
            model_calls=1,
            cost_usd=cost_per_call_usd or "0",
            check_usage=True,
        ),
    )
    if op.status == Operation.Status.SUCCEEDED:
        return _reuse(op, model_name, arguments), True
    scopes = rate_limits.model_scopes(model_name)
    while True:
        grants = rate_limits.acquire(scopes, step=step, attempt=attempt, check=check or _go_on)
        try:
            reply = call_with_timeout(call, timeout)
            break
        except CallTimedOut as exc:
            rate_limits.settle(grants)
            ledger.record_result(
                op, {"error_code": "TIMEOUT", "detail": str(exc)}, status=Operation.Status.FAILED
            )
            raise StepError("TIMEOUT", f"model request: {exc}") from exc
        except StepError as exc:
            rate_limits.settle(grants)
            wait = _provider_wait(exc)
            if wait is not None:
                # The provider's limit holds back every worker's calls to it.
                rate_limits.hold(scopes[0], max(wait, MIN_PROVIDER_HOLD))
            if wait is None or wait > max_held_wait:
                ledger.record_failure(op, exc)
                raise
            # This request waits in ``acquire`` and goes again under its recorded
            # intent, as a call over a limit does: no failure, no retry.
    reply.model = reply.model or model_name
    if cost_per_call_usd is not None:
        charged_after: Decimal | None = Decimal(0)
        reply.cost_usd = str(cost_per_call_usd)
    else:
        # Priced as the model that answered when it has a price of its own (a fallback
        # model's member), else as the model asked.
        answered = reply.model if reply.model in settings.AGENTOPS_MODEL_PRICES else model_name
        cost = price_usd(answered, reply.usage)
        reply.cost_usd = None if cost is None else str(cost)
        charged_after = cost
    tokens = int(reply.usage.get("input_tokens") or 0) + int(reply.usage.get("output_tokens") or 0)
    rate_limits.settle(grants, tokens)
    reconnect.retry_write(
        lambda: _record_reply(op, reply, run, tokens, charged_after),
        what=f"model reply of operation {op.pk}",
    )
    hooks.reached(hooks.MODEL_RESPONSE_RECORDED, run, step)
    return reply, False


def _record_reply(op, reply, run, tokens: int, cost_usd: Decimal | None) -> None:
    """The reply and its usage (charged to the run and its ancestors) in one transaction
    (run again whole after a busy or lost database: the usage is added once, with the
    reply)."""
    with transaction.atomic():
        ledger.record_result(op, reply.as_record())
        budget_mod.add_usage(
            run.pk, tokens=tokens, cost_usd=cost_usd, parent_run_id=run.parent_run_id
        )


def _go_on() -> None:
    """A wait's check that never ends it."""


def _provider_wait(exc: StepError) -> float | None:
    """Seconds a provider's 429 asked to wait (its ``Retry-After``), else ``None``."""
    if exc.code != "RATE_LIMITED":
        return None
    return retry_after_seconds(exc.retry_after)


#: Request fields that name this attempt's draft, not the request: a re-execution
#: streams into a new draft.
_NOT_COMPARED = ("message_id",)


def _reuse(op: Operation, model_name: str, arguments: dict) -> ModelReply:
    """The reply recorded in ``op``, if ``op`` recorded this request (same model, same
    summary); raises ``NonDeterminism`` otherwise."""
    ledger.check_same_request(
        op, model_name, arguments, action=f"model.{arguments['ordinal']}", ignore=_NOT_COMPARED
    )
    return ModelReply.from_record(op.result or {})


# -- the StepContext helpers --------------------------------------------------------


def next_ordinal(ctx) -> int:
    """The ordinal (0-based) of the next model request of the attempt ``ctx`` (a
    ``StepContext``) runs, counted up: requests must take their ordinals in the order
    the step makes them, so that a re-execution finds each recorded one."""
    ordinal = ctx.model_requests
    ctx.model_requests += 1
    return ordinal


def step_request(
    ctx,
    *,
    model: str | None,
    summary: dict[str, Any],
    ask: Callable[[Any], ModelReply],
    timeout: float | None = None,
    ordinal: int | None = None,
) -> tuple[ModelReply, bool]:
    """``request`` for the attempt ``ctx`` (a ``StepContext``) runs: its run, step,
    attempt and worker, after a safe point. ``model`` overrides the step's model
    (``model_name_for``); ``ask(provider)`` asks it, given the model's provider (whose
    ``cost_per_call_usd``, if any, is charged with the call); ``timeout`` in seconds.
    ``ordinal``: one the caller took with ``next_ordinal`` (default: the next one).
    Returns ``(reply, reused)``; raises ``LeaseLost``/``CancelRequested`` (the safe
    point), an unknown model's ``StepError`` and whatever ``request`` raises.
    """
    ctx.safe_point()
    name = model_name_for(ctx.workflow, ctx.step_def, model)
    provider = get_provider(name)
    return request(
        run=ctx.run,
        step=ctx.step,
        attempt=ctx.attempt,
        actor=ctx.worker_id,
        ordinal=next_ordinal(ctx) if ordinal is None else ordinal,
        model_name=name,
        summary=summary,
        call=lambda: ask(provider),
        timeout=timeout,
        cost_per_call_usd=getattr(provider, "cost_per_call_usd", None),
        check=ctx.safe_point,
    )


def call_model(ctx, messages: list[dict[str, Any]], tools: list | None, model: str | None):
    """``StepContext.call_model``: one request through the ledger; returns a ``ModelReply``."""
    tools = list(tools or [])
    reply, _ = step_request(
        ctx,
        model=model,
        summary={"messages": len(messages), "tools": [getattr(t, "name", t) for t in tools]},
        ask=lambda provider: provider.complete(messages, tools, timeout=ctx.step_def.timeout),
        timeout=ctx.step_def.timeout,
    )
    return reply


def stream_model(
    ctx,
    messages: list[dict[str, Any]],
    message_id: str,
    model: str | None,
    on_piece: Callable[[int, str], None],
):
    """``StepContext.stream_model``: stream a text reply through ``on_piece(offset, text)``
    and record the final response like ``call_model``. A reused response is delivered
    as one piece. The step's ``timeout`` holds for the whole stream: past it the request
    is recorded FAILED and ``StepError("TIMEOUT")`` raised, however the reply trickles."""
    timeout = ctx.step_def.timeout

    def consume(provider) -> ModelReply:
        content = ""
        final = None
        pieces: Iterator[str | ModelReply] = iterate_with_timeout(
            lambda: provider.stream(messages, timeout=timeout), timeout
        )
        for piece in pieces:
            if isinstance(piece, ModelReply):
                final = piece
                continue
            on_piece(len(content), piece)
            content += piece
        final = final or ModelReply()
        final.content = content
        return final

    reply, reused = step_request(
        ctx,
        model=model,
        summary={"messages": len(messages), "stream": True, "message_id": message_id},
        ask=consume,
    )
    if reused and reply.content:
        on_piece(0, reply.content)
    return reply
