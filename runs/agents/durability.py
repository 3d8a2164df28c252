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

from runs.agents.bridge import Bridge
from runs.agents.errors import classify
from runs.agents.providers import reply_from_response, request_settings
from runs.engine.effects import ledger, model_calls
from runs.engine.errors import StepError
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
            return reply_from_response(response, {})

        ordinal = model_calls.next_ordinal(run.ctx)
        reply = await run.bridge.ask(
            lambda: run.model_request(
                ordinal,
                {
                    "messages": len(messages),
                    "tools": [t.name for t in model_request_parameters.function_tools],
                },
                lambda: run.bridge.run_on_agent_loop(ask_model()),
            )
        )
        return ModelMessagesTypeAdapter.validate_python([reply.raw])[0]

    @asynccontextmanager
    async def request_stream(
        self, messages, model_settings, model_request_parameters, run_context=None
    ) -> AsyncGenerator[Any]:
        # The response is recorded whole; a streaming consumer gets its parts replayed.
        response = await self.request(messages, model_settings, model_request_parameters)
        yield CompletedStreamedResponse(
            response, model_request_parameters=model_request_parameters, replay_events=True
        )


class LedgerRun:
    """What one agent step execution needs to reach the ledger: the step context, the
    bridge, the model name and the tools' declarations."""

    def __init__(self, ctx, bridge: Bridge, model_name: str, tools: dict[str, AgentTool]):
        self.ctx = ctx
        self.bridge = bridge
        self.model_name = model_name
        self.tools = tools

    def model_request(self, ordinal: int, summary: dict, call) -> Any:
        """On the step thread: one model request through the ledger."""
        reply, _ = model_calls.step_request(
            self.ctx,
            model=self.model_name,
            summary=summary,
            ask=lambda _provider: call(),
            ordinal=ordinal,
            timeout=self.ctx.step_def.timeout,
        )
        return reply

    def tool_call(self, call_id: str, name: str, arguments: dict, run_tool) -> Any:
        """On the step thread: one tool call through the ledger; ``run_tool()`` makes it."""
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
            ctx.run.pk, ctx.step.generation, f"{ctx.step.name}.{ctx.step.seq}", f"tool.{call_id}"
        )
        return ctx.call_tool_keyed(tool, arguments, key=key, action=name, timeout=tool.timeout)


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
                    return await handler(args)
                finally:
                    CURRENT_CALL.reset(token)

            result = run.bridge.run_on_agent_loop(execute())
            try:
                return json.loads(json.dumps(to_jsonable_python(result)))
            except (TypeError, ValueError) as exc:
                raise StepError(
                    "INVALID_RESULT", f"{call.tool_name} returned a value that is not JSON: {exc}"
                ) from exc

        return await run.bridge.ask(
            lambda: run.tool_call(call.tool_call_id, call.tool_name, arguments, run_tool)
        )
