"""A Pydantic AI capability that makes each model request and each tool call of an agent
run an AgentOps operation, as Pydantic AI's own durable integrations do for Temporal,
DBOS and Prefect (a wrapper model around the agent's model, a wrapper around tool
execution), through the public capability hooks.

- Model requests go through ``runs.engine.effects.model_calls.request``: ordinal ``n``
  of the step execution, reused when recorded, charged to the run's budget.
- Tool calls go through ``StepContext.call_tool_keyed`` (``perform_call``) with the
  tool's declared side effect and verify hook, keyed by the model's tool-call id: a
  recorded result is reused, an unsafe call an earlier attempt may have made is verified
  before anything runs again.
"""

import json
import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import CompletedStreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_core import to_jsonable_python

from runs.agents import outcomes
from runs.agents.bridge import Bridge
from runs.agents.errors import classify
from runs.agents.providers import reply_from_response, request_settings
from runs.engine.effects import ledger, model_calls
from runs.engine.effects.budget import BudgetExhausted
from runs.engine.effects.retry import RetryPolicy
from runs.engine.errors import StepError
from runs.engine.state.gateway import record_event
from runs.tools import SIDE_EFFECTS, Tool, ToolCall

#: The AgentOps call a tool function is running for (its run id and idempotency key),
#: for tools that want to pass the key on to an outside system.
CURRENT_CALL: ContextVar[ToolCall | None] = ContextVar("agentops_current_call", default=None)


def current_call() -> ToolCall | None:
    """Inside a tool function run by an AgentOps agent workflow: its ``ToolCall``."""
    return CURRENT_CALL.get()


@dataclass(frozen=True)
class AgentTool:
    """How AgentOps treats one of the agent's tools: ``side_effect`` (``read``,
    ``idempotent`` or ``unsafe``), ``verify(arguments, call) -> VerifyAnswer`` for an
    unsafe tool, ``timeout`` in seconds (``None``: the agent step's ``timeout``)."""

    side_effect: str = "unsafe"
    verify: Any = None
    timeout: float | None = None

    def __post_init__(self) -> None:
        if self.side_effect not in SIDE_EFFECTS:
            raise ValueError(f"side_effect must be one of {SIDE_EFFECTS}, not {self.side_effect!r}")


class LedgerModel(WrapperModel):
    """The agent's model with every request made through the operation ledger."""

    def __init__(self, wrapped, ledger_run: "LedgerRun"):
        super().__init__(wrapped)
        self.ledger_run = ledger_run

    async def request(self, messages, model_settings, model_request_parameters) -> ModelResponse:
        response, _ = await self._request(messages, model_settings, model_request_parameters)
        return response

    async def _request(
        self, messages, model_settings, model_request_parameters
    ) -> tuple[ModelResponse, bool]:
        """The response and whether it was recorded before (by an earlier attempt)."""
        run = self.ledger_run

        async def ask_model() -> Any:
            try:
                response = await self.wrapped.request(
                    messages,
                    request_settings(run.ctx.step_def.timeout, model_settings),
                    model_request_parameters,
                )
            except Exception as exc:  # noqa: BLE001 - every provider failure gets a code
                raise classify(exc) from exc
            reply = reply_from_response(response, {})
            # The model that answered (a FallbackModel's member), priced by its own name.
            reply.model = answered_by(response) or reply.model
            return reply

        ordinal = model_calls.next_ordinal(run.ctx)
        reply, reused = await run.bridge.ask(
            lambda: run.model_request(
                ordinal,
                {
                    "messages": len(messages),
                    "tools": [t.name for t in model_request_parameters.function_tools],
                },
                lambda: run.bridge.run_on_agent_loop(ask_model()),
            )
        )
        return ModelMessagesTypeAdapter.validate_python([reply.raw])[0], reused

    @asynccontextmanager
    async def request_stream(
        self, messages, model_settings, model_request_parameters, run_context=None
    ) -> AsyncGenerator[Any]:
        # The response is recorded whole; a streaming consumer (an event_stream_handler)
        # gets its parts as events once: a response recorded before a crash and reused
        # by the re-executed step is not sent again.
        response, reused = await self._request(messages, model_settings, model_request_parameters)
        yield CompletedStreamedResponse(
            response, model_request_parameters=model_request_parameters, replay_events=not reused
        )


#: Each model request of an agent run: 3 tries, 1 s doubling up to 30 s (at least what
#: a ``Retry-After`` asks), on the retryable codes (rate limit, unavailable, timeout).
DEFAULT_REQUEST_RETRY = RetryPolicy(max_attempts=3, initial_delay=1.0, max_delay=30.0)


def answered_by(response: ModelResponse) -> str:
    """``provider:model`` of the model that produced ``response`` ("" when unnamed)."""
    name = response.model_name or ""
    if not name or ":" in name or not response.provider_name:
        return name
    return f"{response.provider_name}:{name}"


class LedgerRun:
    """What one agent step execution needs to reach the ledger: the step context, the
    bridge, the model's ledger name and price per call (USD, for a provider that knows
    it), the tools' declarations and the retry policy of each model request."""

    def __init__(
        self,
        ctx,
        bridge: Bridge,
        model_name: str,
        tools: dict[str, AgentTool],
        *,
        cost_per_call_usd: str | None = None,
        request_retry: RetryPolicy = DEFAULT_REQUEST_RETRY,
    ):
        self.ctx = ctx
        self.bridge = bridge
        self.model_name = model_name
        self.tools = tools
        self.cost_per_call_usd = cost_per_call_usd
        self.request_retry = request_retry

    def model_request(self, ordinal: int, summary: dict, call) -> tuple[Any, bool]:
        """On the step thread: model request ``ordinal`` through the ledger, tried again
        by ``request_retry`` on a retryable error (waiting its backoff, or the provider's
        ``Retry-After`` when longer) without ending the step's attempt: another
        request's failure never counts against this one. A wait longer than the policy's
        ``max_delay`` is left to the step's own retry, so no worker waits that long.
        Returns ``(reply, reused)``; raises the last ``StepError`` when the policy gives
        up."""
        ctx = self.ctx
        started = time.monotonic()
        tries = 1
        while True:
            ctx.safe_point()
            try:
                return model_calls.request(
                    run=ctx.run,
                    step=ctx.step,
                    attempt=ctx.attempt,
                    actor=ctx.worker_id,
                    ordinal=ordinal,
                    model_name=self.model_name,
                    summary=summary,
                    call=call,
                    timeout=ctx.step_def.timeout,
                    cost_per_call_usd=self.cost_per_call_usd,
                    check=ctx.safe_point,
                )
            except BudgetExhausted:
                raise
            except StepError as exc:
                decision = self.request_retry.decide(
                    tries, exc.code, time.monotonic() - started, retry_after=exc.retry_after
                )
                if not decision.retry or decision.delay > self.request_retry.max_delay:
                    raise
                record_event(
                    ctx.run.pk,
                    "model.request_retry",
                    {
                        "ordinal": ordinal,
                        "try": tries,
                        "error_code": exc.code,
                        "error_detail": exc.detail[:500],
                        "delay_s": decision.delay,
                    },
                    step_id=ctx.step.pk,
                    actor=ctx.worker_id,
                )
                _wait(ctx, decision.delay)
                tries += 1

    def tool_call(
        self, call_id: str, name: str, arguments: dict, run_tool, *, approved: bool = False
    ) -> Any:
        """On the step thread: one tool call through the ledger; ``run_tool()`` makes it.
        ``approved``: the call runs after a person approved it; a tool that asked for the
        approval itself (``ApprovalRequired``) has its first run recorded under the plain
        key, so the approved run gets a key of its own."""
        ctx = self.ctx
        declared = self.tools.get(name) or AgentTool()
        tool = Tool(
            name,
            fn=lambda args, info: run_tool(args, info),
            side_effect=declared.side_effect,
            verify=declared.verify,
            timeout=declared.timeout or ctx.step_def.timeout,
        )
        key = ledger.idempotency_key(
            ctx.run.pk,
            ctx.step.generation,
            f"{ledger.step_scope(ctx.step)}.{ctx.step.seq}",
            f"tool.{call_id}.approved" if approved else f"tool.{call_id}",
        )
        return ctx.call_tool_keyed(tool, arguments, key=key, action=name, timeout=tool.timeout)


def _wait(ctx, seconds: float) -> None:
    """Wait ``seconds`` on the step thread, at a safe point every 50 ms (a lost lease or
    a cancel request ends the wait)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ctx.safe_point()
        ctx.lease_lost.wait(min(0.05, left))
    ctx.safe_point()


class AgentOpsDurability(AbstractCapability):
    """The capability an agent workflow passes to each agent run."""

    def __init__(self, ledger_run: LedgerRun):
        super().__init__()
        self.ledger_run = ledger_run

    def get_wrapper_model(self, model):
        return LedgerModel(model, self.ledger_run)

    async def wrap_tool_execute(self, ctx, *, call, tool_def, args, handler) -> Any:
        run = self.ledger_run
        arguments = to_jsonable_python(args)
        if not isinstance(arguments, dict):
            arguments = {"value": arguments}

        def run_tool(_arguments: dict, info: ToolCall) -> Any:
            async def execute() -> Any:
                token = CURRENT_CALL.set(info)
                try:
                    return await outcomes.capture(call.tool_name, handler(args))
                finally:
                    CURRENT_CALL.reset(token)

            result = run.bridge.run_on_agent_loop(execute())
            try:
                return json.loads(json.dumps(to_jsonable_python(result)))
            except (TypeError, ValueError) as exc:
                raise StepError(
                    "INVALID_RESULT", f"{call.tool_name} returned a value that is not JSON: {exc}"
                ) from exc

        recorded = await run.bridge.ask(
            lambda: run.tool_call(
                call.tool_call_id,
                call.tool_name,
                arguments,
                run_tool,
                approved=bool(ctx.tool_call_approved),
            )
        )
        return outcomes.release(recorded)
