"""``register_agent``: a ``pydantic_ai.Agent`` as an AgentOps workflow.

The workflow has three steps:

- ``agent``: runs the agent on the run's ``prompt`` (input ``{"prompt": str}``) until
  it answers or asks for approval of a deferred tool call (``requires_approval``);
- ``approve``: an approval step per deferred call (tool name and arguments shown to the
  approver; approve, approve with edited arguments, reject, or reject with a message the
  model receives instead of the tool result); the run waits with no lease held;
- ``continue``: runs the agent again from the stored conversation with the decisions.

Every model request and tool call goes through the ledger (``runs.agents.durability``),
so a step re-executed after a crash replays recorded responses and results in order.
Model requests stream into draft messages; the tool calls of one response run at once.
The agent's messages become the run's Messages. The conversation is carried from step
to step in the checkpoint (the step's output, ``history`` as Pydantic AI JSON).
"""

import json
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from pydantic import ValidationError
from pydantic_ai import DeferredToolResults, ToolApproved, ToolDenied, capture_run_messages
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)

from runs.agents import inputs
from runs.agents.bridge import CONTROL_EXCEPTIONS, Bridge
from runs.agents.durability import (
    DEFAULT_REQUEST_RETRY,
    AgentOpsDurability,
    AgentTool,
    FreshEvents,
    LedgerRun,
)
from runs.agents.errors import classify_agent_error
from runs.agents.history import thread_history
from runs.agents.providers import PydanticAIProvider, aclose
from runs.engine.control.deferred_calls import TOOL_RESULT_SIGNAL
from runs.engine.effects.model_providers import default_model, get_provider
from runs.engine.effects.retry import RetryPolicy
from runs.engine.errors import StepError
from runs.engine.execution import aio
from runs.tools import Tool
from runs.workflows import registry
from runs.workflows.definition import Workflow, WorkflowDefinitionError

AGENT_STEPS = ("agent", "continue", "resume")
TOOL_RESULT_SCHEMA = {
    "type": "object",
    "required": ["tool_call_id", "result"],
    "properties": {"tool_call_id": {"type": "string", "minLength": 1}, "result": {}},
}


class AgentWorkflow(Workflow):
    """A workflow running a ``pydantic_ai.Agent`` (see the module docstring)."""

    def __init__(
        self,
        agent,
        *,
        name,
        version,
        description,
        tools,
        model,
        offline_model,
        run_options=(),
        request_retry: RetryPolicy | None = None,
        event_stream_handler=None,
        deferred_timeout: float | None = None,
        timeout: float | None = None,
    ):
        super().__init__(
            name,
            version=version,
            description=description or f"Pydantic AI agent {name}",
            input_fields={"prompt": str},
            message_field="prompt",
            model=model,
        )
        self.agent = agent
        unknown = set(run_options) - inputs.RUN_OPTIONS
        if unknown:
            raise WorkflowDefinitionError(
                f"{name}: run_options may name {sorted(inputs.RUN_OPTIONS)}, not {sorted(unknown)}"
            )
        self.run_options = frozenset(run_options)
        self.request_retry = request_retry or DEFAULT_REQUEST_RETRY
        self.event_stream_handler = event_stream_handler
        self.tools = {
            tool: spec if isinstance(spec, AgentTool) else AgentTool(side_effect=spec)
            for tool, spec in (tools or {}).items()
        }
        # A tool may instead say it in its own metadata: @agent.tool_plain(metadata=
        # {"side_effect": "read"}).
        for toolset in agent.toolsets:
            for tool_name, tool in (getattr(toolset, "tools", None) or {}).items():
                side_effect = (getattr(tool, "metadata", None) or {}).get("side_effect")
                if side_effect and tool_name not in self.tools:
                    self.tools[tool_name] = AgentTool(side_effect=side_effect)
        # Registered by name so "check the outside world now" on an unknown outcome
        # finds the verify hook in any process; the calls themselves go through the agent.
        for tool_name, spec in self.tools.items():
            Tool(
                tool_name,
                fn=_only_in_agent_runs,
                side_effect=spec.side_effect,
                verify=spec.verify,
                timeout=spec.timeout,
            )
        self.offline_model = offline_model
        self.add_step_fn("agent", self._run_agent, final=True, timeout=timeout)
        self.approval("approve", on_reject="continue")(self._ask_approval)
        self.add_step_fn("continue", self._run_agent, final=True, timeout=timeout)
        self.signal(
            TOOL_RESULT_SIGNAL,
            "deliver",
            schema=TOOL_RESULT_SCHEMA,
            timeout=deferred_timeout,
            on_timeout="resume" if deferred_timeout else None,
        )(_await_results)
        self.add_step_fn("resume", self._run_agent, final=True, timeout=timeout)
        self.deferred_timeout = deferred_timeout

    def validate_input(self, data) -> dict[str, str]:
        """Field errors of a run's input: the prompt, then ``deps`` and the per-run
        options (``runs.agents.inputs``)."""
        errors = super().validate_input(data)
        if isinstance(data, dict):
            errors.update(inputs.input_errors(self.agent, data, self.run_options))
        return errors

    def add_step_fn(self, name: str, fn, **options) -> None:
        self.step(name, **options)(fn)

    # -- the model ---------------------------------------------------------------------

    def run_model(self, ctx) -> tuple[Any, str, str | None]:
        """``(Pydantic AI model, name recorded in the ledger, price per call in USD or
        None)`` for the run ``ctx`` executes: the input's ``model`` (where allowed), else
        the workflow's, else the agent's own, else the default model. Raises
        ``StepError("MODEL_REQUEST_INVALID")`` for a name the deployment cannot use and
        ``ModelNotConfigured`` (a takeover) when there is no name and no default."""
        name = ctx.input.get("model") if "model" in self.run_options else None
        name = name or self.model
        own = self.agent.model
        if not name and own is not None and not isinstance(own, str):
            return own, model_label(own), None
        try:
            name = name or own or default_model()
            model, _ = self.pydantic_model(name)
            provider = get_provider(name)
        except ImproperlyConfigured as exc:
            raise StepError("MODEL_REQUEST_INVALID", str(exc)) from exc
        return model, name, getattr(provider, "cost_per_call_usd", None)

    def pydantic_model(self, name: str):
        """The Pydantic AI model for ``name``: ``sim`` is the offline model given at
        registration (else the agent's own); anything else a provider model."""
        if name.split(":", 1)[0] == "sim":
            model = self.offline_model or self.agent.model
            if model is None:
                raise StepError(
                    "MODEL_REQUEST_INVALID",
                    f"{self.name} has no offline model: set AGENTOPS_MODEL to a provider model",
                )
            return model, None
        provider = PydanticAIProvider(name, "AGENTOPS_MODEL")
        return provider.model(), provider

    # -- steps ---------------------------------------------------------------------------

    def _run_agent(self, ctx) -> dict[str, Any]:
        state = latest_state(ctx)
        decisions = dict((state or {}).get("decisions") or {})
        decision = ctx.outputs.get("approve")
        undecided = [p for p in (state or {}).get("pending_ids", []) if p not in decisions]
        if state and decision and decision.get("decision") == "expired" and undecided:
            # An expired approval names no call: it answers the one it asked about.
            decisions[undecided[0]] = {**decision, "tool_call_id": undecided[0]}
        elif state and decision and decision.get("tool_call_id") in undecided:
            decisions[decision["tool_call_id"]] = decision
        if state and any(p not in decisions for p in state.get("pending_ids", [])):
            ctx.goto("approve")
            return {**state, "decisions": decisions, "turn": state["turn"] + 1}
        # Only "resume" follows "deliver": another step would read an older delivery.
        fresh = ctx.outputs.get("deliver") if ctx.step.name == "resume" else None
        delivered = take_delivery(state, fresh)
        if state and any(c not in delivered for c in state.get("deferred_ids", [])):
            ctx.goto("deliver")
            return {
                **state,
                "decisions": decisions,
                "delivered": delivered,
                "turn": state["turn"] + 1,
            }

        model, ledger_name, cost_per_call = self.run_model(ctx)
        bridge = Bridge()
        ledger_run = LedgerRun(
            ctx,
            bridge,
            ledger_name,
            self.tools,
            cost_per_call_usd=cost_per_call,
            request_retry=self.request_retry,
        )
        if state:
            history = ModelMessagesTypeAdapter.validate_python(state["history"])
        else:
            history = thread_history(ctx)
        results = deferred_results(decisions, delivered, self.deferred_timeout) if state else None
        captured: list[list] = []
        ledger_run.history_len = len(history)
        # Any handler of the run's events (given here, or the agent's own, e.g. a
        # ProcessEventStream capability) gets each event once.
        ledger_run.watch_replays = (
            self.event_stream_handler is not None
            or self.agent.root_capability.has_wrap_run_event_stream
        )
        capabilities: list[AbstractCapability] = [AgentOpsDurability(ledger_run)]
        if ledger_run.watch_replays:
            capabilities.append(FreshEvents(ledger_run))

        async def run_agent():
            # Tool calls run at once; their events and results come in the order of the
            # calls, so a re-executed step meets them (and any error) the same way.
            with (
                capture_run_messages() as messages,
                self.agent.parallel_tool_call_execution_mode("parallel_ordered_events"),
            ):
                captured.append(messages)
                return await self.agent.run(
                    None if state else ctx.input["prompt"],
                    message_history=history or None,
                    deferred_tool_results=results,
                    model=model,
                    capabilities=capabilities,
                    event_stream_handler=self.event_stream_handler,
                    **inputs.run_arguments(self.agent, ctx.input),
                )

        try:
            result = bridge.run(run_agent())
        except BaseException as exc:
            # What the agent said and did so far stays with the step: written to the
            # thread when the run fails for good, made again when the step re-executes.
            # The drafts it streamed give way to those messages.
            abandon_drafts(ctx, ledger_run)
            made = captured[0][len(history) :] if captured else []
            stage_messages(ctx, made, skip_first_prompt=state is None)
            if isinstance(exc, CONTROL_EXCEPTIONS) or not isinstance(exc, Exception):
                raise
            raise classify_agent_error(exc) from exc
        finally:
            if model is not self.agent.model and model is not self.offline_model:
                # Built for this run by a provider: its HTTP client goes with it.
                aio.run(aclose(model))
        new = result.new_messages()
        stage_messages(ctx, new, skip_first_prompt=state is None, ledger_run=ledger_run)
        all_messages = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
        output = result.output
        turn = (state or {}).get("turn", 0) + 1
        pending = list(getattr(output, "approvals", None) or [])
        deferred = list(getattr(output, "calls", None) or [])
        if pending or deferred:
            # Approvals first; then the run waits for the outside results.
            ctx.goto("approve" if pending else "deliver")
            return {
                "turn": turn,
                "history": all_messages,
                "pending": [
                    {"id": p.tool_call_id, "name": p.tool_name, "arguments": p.args_as_dict()}
                    for p in pending
                ],
                "pending_ids": [p.tool_call_id for p in pending],
                "decisions": {},
                "deferred": [
                    {"id": c.tool_call_id, "name": c.tool_name, "arguments": c.args_as_dict()}
                    for c in deferred
                ],
                "deferred_ids": [c.tool_call_id for c in deferred],
                "delivered": {},
            }
        ctx.goto(None)
        answer = output if isinstance(output, str) else json.dumps(_jsonable(output))
        return {"turn": turn, "history": all_messages, "answer": answer, "pending_ids": []}

    def _ask_approval(self, ctx) -> dict[str, Any]:
        state = latest_state(ctx)
        decisions = (state or {}).get("decisions") or {}
        pending = (state or {}).get("pending") or []
        call = next(p for p in pending if p["id"] not in decisions)
        schema = self.tool_schema(call["name"])
        return {
            "question": f"Run {call['name']} with {json.dumps(call['arguments'])}?",
            "reason": f"the agent {self.name} asks to call {call['name']}, which needs approval",
            "evidence": {
                "kind": "tool_call",
                "tool": call["name"],
                "tool_call_id": call["id"],
                "arguments": call["arguments"],
                "schema": schema,
            },
        }

    # -- approvals -------------------------------------------------------------------------

    def _tool(self, name: str):
        for toolset in self.agent.toolsets:
            tools = getattr(toolset, "tools", None)
            if isinstance(tools, dict) and name in tools:
                return tools[name]
        return None

    def tool_schema(self, name: str) -> dict:
        """The JSON schema of tool ``name``'s arguments (empty when unknown)."""
        tool = self._tool(name)
        return tool.tool_def.parameters_json_schema if tool is not None else {}

    def tool_description(self, name: str) -> str:
        """What tool ``name`` does, as its docstring tells the model ("" when unknown)."""
        tool = self._tool(name)
        return (tool.tool_def.description or "") if tool is not None else ""

    def validate_tool_arguments(self, name: str, arguments: Any) -> dict[str, str]:
        """Field errors (``{"arguments.<field>": message}``) of edited ``arguments`` for
        tool ``name``, validated by the tool's own schema; empty when valid. Strictly, as
        the JSON they came in: a person's ``true`` or ``"5"`` is not an amount, although
        lax validation would turn it into ``1.0`` or ``5.0``."""
        if not isinstance(arguments, dict):
            return {"arguments": "must be a JSON object"}
        tool = self._tool(name)
        if tool is None:
            return {"arguments": f"unknown tool {name}"}
        try:
            tool.function_schema.validator.validate_json(json.dumps(arguments), strict=True)
        except ValidationError as exc:
            return {
                "arguments." + ".".join(str(p) for p in err["loc"])
                if err["loc"]
                else "arguments": err["msg"]
                for err in exc.errors()
            }
        return {}


def model_label(model) -> str:
    """The ledger name of a Pydantic AI model object: ``provider:model`` (a
    ``FallbackModel`` is ``fallback:a,b``)."""
    name = model.model_name
    return name if ":" in name else f"{model.system}:{name}"


def _only_in_agent_runs(arguments: dict, call) -> None:
    raise StepError("INTERNAL", "an agent's tool is called by its agent run only")


def latest_state(ctx) -> dict[str, Any] | None:
    """The agent state of the newest agent step before this one (by ``turn``)."""
    states = [ctx.outputs.get(name) for name in AGENT_STEPS]
    states = [s for s in states if isinstance(s, dict) and "history" in s]
    return max(states, key=lambda s: s.get("turn", 0), default=None)


def take_delivery(state: dict | None, output: dict | None) -> dict[str, Any]:
    """The outside results delivered so far (``{tool call id: {"result": JSON} or
    {"timed_out": True}}``), with the ``deliver`` step's latest ``output`` added when it
    answers a call still waiting (a timeout answers all of them)."""
    delivered = dict((state or {}).get("delivered") or {})
    waiting = [c for c in (state or {}).get("deferred_ids", []) if c not in delivered]
    if not output or not waiting:
        return delivered
    if output.get("timed_out"):
        delivered.update({c: {"timed_out": True} for c in waiting})
        return delivered
    payload = output.get("payload") or {}
    if payload.get("tool_call_id") in waiting:
        delivered[payload["tool_call_id"]] = {"result": payload.get("result")}
    return delivered


def _await_results(ctx) -> None:
    """The ``deliver`` step: the run waits (WAITING_EXTERNAL, no lease) for the signal
    ``tool_result`` carrying one deferred call's result."""


def deferred_results(
    decisions: dict[str, dict],
    delivered: dict[str, dict] | None = None,
    timeout: float | None = None,
) -> DeferredToolResults:
    """Approval decisions and delivered outside results as Pydantic AI's deferred tool
    results: approve (with edited arguments), or deny (with the approver's message or a
    rejection note); a delivered result as the call's return value, a timed-out call as
    a note that no result came within ``timeout`` seconds."""
    calls = {
        call_id: d["result"]
        if "result" in d
        else f"No result came from the outside system within {timeout:g} s."
        for call_id, d in (delivered or {}).items()
    }
    approvals: dict[str, Any] = {}
    for call_id, d in decisions.items():
        if d.get("decision") == "approved":
            edited = d.get("arguments")
            approvals[call_id] = ToolApproved(override_args=edited) if edited else True
        else:
            message = d.get("message") or (
                f"The call was {d.get('decision', 'rejected')} by {d.get('by') or 'the approver'}"
                + (f": {d['comment']}" if d.get("comment") else ".")
            )
            approvals[call_id] = ToolDenied(message)
    return DeferredToolResults(approvals=approvals, calls=calls)


def stage_messages(
    ctx, messages: list, *, skip_first_prompt: bool, ledger_run: LedgerRun | None = None
) -> None:
    """Stage the agent's new messages as the run's Messages: assistant replies with their
    tool calls, tool results (and retry prompts) with the id of their call. A message
    streamed into a draft (``ledger_run``'s) finishes that draft, which holds its place
    in the thread; the others are added after them."""
    responses = list(ledger_run.response_drafts) if ledger_run else []
    tools = {k: list(v) for k, v in (ledger_run.tool_drafts if ledger_run else {}).items()}

    def stage(role: str, text: str, draft: str | None, **fields) -> None:
        if draft is None:
            ctx.add_message(role, text, **fields)
        else:
            ctx.finish_message(draft, text, **fields)

    skipped = not skip_first_prompt
    for message in messages:
        if isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = [
                {"id": p.tool_call_id, "name": p.tool_name, "arguments": p.args_as_dict()}
                for p in message.parts
                if isinstance(p, ToolCallPart)
            ]
            stage("assistant", text, responses.pop(0) if responses else None, tool_calls=calls)
        elif isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart | RetryPromptPart) and part.tool_call_id:
                    if isinstance(part, ToolReturnPart):
                        text = part.model_response_str()
                    else:
                        text = part.model_response()
                    waiting = tools.get(part.tool_call_id)
                    draft = waiting.pop(0) if waiting else None
                    stage("tool", text, draft, tool_call_id=part.tool_call_id)
                elif part.part_kind == "user-prompt" and not skipped:
                    skipped = True


def abandon_drafts(ctx, ledger_run: LedgerRun) -> None:
    """Mark the drafts this execution streamed superseded (the agent run ended with an
    error: its messages are staged plainly, or made again by the next attempt). Best
    effort: a database that refuses leaves them to the next attempt's drafts."""
    from runs.engine.data import drafts

    for message_id in [*ledger_run.response_drafts, *sum(ledger_run.tool_drafts.values(), [])]:
        try:
            drafts.abandon(
                run_id=ctx.run.pk,
                step_id=ctx.step.pk,
                message_id=message_id,
                attempt=ctx.attempt,
                reason="the agent run ended with an error",
                actor=ctx.worker_id,
            )
        except Exception:  # noqa: BLE001 - the step's own error is the one to report
            return


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value)


def register_agent(
    agent,
    *,
    name: str,
    version: int = 1,
    description: str = "",
    tools: dict[str, AgentTool | str] | None = None,
    model: str | None = None,
    offline_model=None,
    run_options: tuple[str, ...] | frozenset[str] = (),
    request_retry: RetryPolicy | None = None,
    event_stream_handler=None,
    deferred_timeout: float | None = None,
    timeout: float | None = None,
) -> AgentWorkflow:
    """Register ``agent`` (a ``pydantic_ai.Agent``) as the workflow ``name@version``;
    start it with ``runs start NAME --input '{"prompt": "..."}'``.

    ``tools``: ``{tool name: AgentTool(side_effect, verify) or "read"/"idempotent"/
    "unsafe"}``; an undeclared tool counts as ``unsafe`` with no verify hook (an
    interrupted call then goes to a human). ``model``: the model this workflow asks
    (default: the agent's own model, else ``AGENTOPS_MODEL``). ``offline_model``: the
    Pydantic AI model used when the model is ``sim`` (e.g. a ``FunctionModel``; default:
    the agent's own model). ``run_options``: which of ``model``, ``model_settings``,
    ``usage_limits`` and ``metadata`` a run's input may set. ``request_retry``: the
    ``RetryPolicy`` of each model request (default: 3 attempts, 1 s doubling to 30 s).
    ``event_stream_handler``: Pydantic AI's ``async fn(ctx, events)``, given the model's
    events live as it streams, and the tool events, each once (a response, a tool call
    or a result recorded before a crash is not sent again); a handler of the agent's own
    (``Agent(capabilities=[ProcessEventStream(fn)])``) gets them the same way.
    ``deferred_timeout``: seconds a tool call deferred with ``CallDeferred`` waits for
    its outside result (``runs deliver``); past it the model is told none came
    (default ``None``: wait for good).
    ``timeout``: seconds each model request and each tool call of the agent may take
    (a tool's own ``AgentTool.timeout`` first) before ``TIMEOUT``; ``None``: no limit.
    Returns the workflow; raises ``WorkflowDefinitionError`` on a name clash or an
    unknown run option.
    """
    workflow = AgentWorkflow(
        agent,
        name=name,
        version=version,
        description=description,
        tools=tools,
        model=model,
        offline_model=offline_model,
        run_options=run_options,
        request_retry=request_retry,
        event_stream_handler=event_stream_handler,
        deferred_timeout=deferred_timeout,
        timeout=timeout,
    )
    return registry.register(workflow)


__all__ = ["AgentTool", "AgentWorkflow", "register_agent"]
