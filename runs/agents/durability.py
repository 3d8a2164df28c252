"""A Pydantic AI capability that makes each model request and each tool call of an agent
run an AgentOps operation, as Pydantic AI's own durable integrations do for Temporal,
DBOS and Prefect (a wrapper model around the agent's model, a wrapper around tool
execution), through the public capability hooks.

- Model requests go through ``runs.engine.effects.model_calls.request``: ordinal ``n``
  of the step execution, reused when recorded, charged to the run's budget.
- Model requests stream (``LedgerModel``, ``Relay``): the text goes to a draft message
  as it comes, the events to the agent live, the final response to the ledger once.
- Tool calls go through ``StepContext.call_tool_keyed`` (``perform_call``) with the
  tool's declared side effect and verify hook, keyed by the model's tool-call id: a
  recorded result is reused, an unsafe call an earlier attempt may have made is verified
  before anything runs again. The calls of one response run at once, each on a thread
  of its own.
"""

import asyncio
import json
import queue
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    FinalResultEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    RetryPromptPart,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import CompletedStreamedResponse, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.usage import RequestUsage
from pydantic_core import to_jsonable_python

from runs.agents import outcomes
from runs.agents.bridge import Bridge
from runs.agents.errors import classify
from runs.agents.providers import reply_from_response, request_settings
from runs.engine.data import drafts
from runs.engine.effects import ledger, model_calls
from runs.engine.effects.budget import BudgetExhausted
from runs.engine.effects.calls import CallTimedOut
from runs.engine.effects.retry import RetryPolicy
from runs.engine.errors import StepError
from runs.engine.state.gateway import record_event
from runs.models import Operation
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
    """The agent's model with every request made through the operation ledger, streamed:
    the text reaches the run's draft message (and its SSE stream) as the model writes
    it, the events reach the agent (and its ``event_stream_handler``) live, and the
    final response is recorded once. A response recorded by an earlier attempt is
    reused without events; its text goes to the draft in one piece."""

    def __init__(self, wrapped, ledger_run: "LedgerRun"):
        super().__init__(wrapped)
        self.ledger_run = ledger_run

    async def request(self, messages, model_settings, model_request_parameters) -> ModelResponse:
        async with self.request_stream(messages, model_settings, model_request_parameters) as s:
            async for _ in s:
                pass
        return s.get()

    @asynccontextmanager
    async def request_stream(
        self, messages, model_settings, model_request_parameters, run_context=None
    ) -> AsyncGenerator[Any]:
        run = self.ledger_run
        timeout = run.ctx.step_def.timeout

        @asynccontextmanager
        async def open_stream():
            settings = request_settings(timeout, model_settings)
            if _streams(self.wrapped):
                async with self.wrapped.request_stream(
                    messages, settings, model_request_parameters, run_context
                ) as stream:
                    yield stream
            else:
                response = await self.wrapped.request(messages, settings, model_request_parameters)
                yield CompletedStreamedResponse(
                    response, model_request_parameters=model_request_parameters, replay_events=True
                )

        relay = Relay(asyncio.get_running_loop(), open_stream)
        summary = {
            "messages": len(messages),
            "tools": [t.name for t in model_request_parameters.function_tools],
        }
        ordinal = model_calls.next_ordinal(run.ctx)
        relay.recorded = asyncio.ensure_future(
            run.bridge.ask(lambda: run.streamed_request(ordinal, summary, relay, messages))
        )
        # Read even when the agent stops before it (the bridge re-raises what matters).
        relay.recorded.add_done_callback(lambda f: f.cancelled() or f.exception())
        live = LiveResponse(model_request_parameters, relay, self.model_name)
        yield live
        # A consumer that stopped early still waits for the response to be recorded.
        async for _ in live:
            pass


def _streams(model) -> bool:
    """Whether ``model`` can stream: a ``FunctionModel`` only with a stream function, a
    model made of others (``FallbackModel``, a ``WrapperModel``) only when each of them
    can, for it streams through whichever answers."""
    from pydantic_ai.models import Model
    from pydantic_ai.models.fallback import FallbackModel
    from pydantic_ai.models.function import FunctionModel

    if isinstance(model, FunctionModel):
        return model.stream_function is not None
    if isinstance(model, FallbackModel):
        return all(_streams(member) for member in model.models)
    if isinstance(model, WrapperModel):
        return _streams(model.wrapped)
    return type(model).request_stream is not Model.request_stream


#: What the relay hands the agent after a try's last event: the next try starts over.
_RESTART = object()
#: ... and after the request's last try.
_END = object()


class Relay:
    """One model request's stream between the agent loop and the step thread.

    The step thread starts each try (``start``); a task on the agent loop opens the
    model's stream, and hands every event both to the step thread (``to_step``: the
    draft's text) and to the agent (``to_agent``: ``LiveResponse``), then the final
    response to the step thread, which records it. ``recorded`` is the step thread's
    answer, ``(ModelReply, reused)``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, open_stream):
        self.loop = loop
        self.open_stream = open_stream
        self.to_step: queue.Queue = queue.Queue()
        self.to_agent: asyncio.Queue = asyncio.Queue()
        self.recorded: asyncio.Future | None = None
        self._producer: asyncio.Task | None = None
        self._tries = 0
        #: The step thread's current try: what ``to_step`` holds from an earlier,
        #: cancelled try (its "stopped" error comes late) is not this try's.
        self.current = 0

    def start(self) -> None:
        """From the step thread: begin a try."""
        self.current += 1
        self.loop.call_soon_threadsafe(self._start, self.current)

    def cancel(self) -> None:
        """From the step thread: stop the try in flight (timeout, lost lease, cancel)."""
        self.loop.call_soon_threadsafe(lambda: self._producer and self._producer.cancel())

    def end(self) -> None:
        """From the step thread: no more tries; the agent's stream ends."""
        self.loop.call_soon_threadsafe(self.to_agent.put_nowait, _END)

    def _start(self, attempt: int) -> None:
        if self._tries:
            self.to_agent.put_nowait(_RESTART)
        self._tries += 1
        self._producer = self.loop.create_task(self._produce(attempt))

    async def _produce(self, attempt: int) -> None:
        try:
            async with self.open_stream() as stream:
                async for event in stream:
                    self.to_step.put((attempt, "event", event))
                    self.to_agent.put_nowait(event)
                self.to_step.put((attempt, "done", stream.get()))
        except asyncio.CancelledError:
            stopped = StepError("INTERNAL", "the model request was stopped")
            self.to_step.put((attempt, "error", stopped))
            raise
        except Exception as exc:  # noqa: BLE001 - classified on the step thread
            self.to_step.put((attempt, "error", exc))


class LiveResponse(StreamedResponse):
    """The stream Pydantic AI reads: the model's events as they come (none for a reused
    response), then the recorded response as ``get()``."""

    def __init__(self, model_request_parameters, relay: Relay, model_name: str):
        super().__init__(model_request_parameters=model_request_parameters)
        self._relay = relay
        self._name = model_name
        self._started = datetime.now(UTC)
        self._response: ModelResponse | None = None

    async def _get_event_iterator(self) -> AsyncIterator[Any]:
        relay = self._relay
        while (event := await relay.to_agent.get()) is not _END:
            if event is _RESTART:
                # A retried try streams its response from the start.
                self.__dict__.pop("_parts_manager", None)
                continue
            if isinstance(event, PartEndEvent | FinalResultEvent):
                continue  # made again by StreamedResponse from the parts
            self._parts_manager.apply_event(event)
            yield event
        assert relay.recorded is not None
        reply, _ = await relay.recorded
        response = ModelMessagesTypeAdapter.validate_python([reply.raw])[0]
        assert isinstance(response, ModelResponse)
        self._response = response

    def get(self) -> ModelResponse:
        return self._response if self._response is not None else super().get()

    @property
    def usage(self) -> RequestUsage:
        return self._response.usage if self._response is not None else RequestUsage()

    @property
    def model_name(self) -> str:
        return (self._response.model_name if self._response else None) or self._name

    @property
    def provider_name(self) -> str | None:
        return self._response.provider_name if self._response else None

    @property
    def provider_url(self) -> str | None:
        return self._response.provider_url if self._response else None

    @property
    def timestamp(self) -> datetime:
        return self._response.timestamp if self._response else self._started


class _Draft:
    """On the step thread: the draft message one model request's text streams into."""

    def __init__(self, ctx, message_id: str):
        self.ctx = ctx
        self.message_id = message_id
        self.text = ""

    def add(self, piece: str) -> None:
        self.ctx.check_stopped()
        drafts.delta(
            run_id=self.ctx.run.pk,
            step=self.ctx.step,
            attempt=self.ctx.attempt,
            message_id=self.message_id,
            offset=len(self.text),
            text=piece,
            content=self.text + piece,
            actor=self.ctx.worker_id,
        )
        self.text += piece


def _text_piece(event) -> str:
    """The text an event of a model's stream adds ("" for anything but text)."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta or ""
    return ""


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
        #: Messages of the run's history: the ones after them are this step's.
        self.history_len = 0
        #: The draft of each model response, in the order of the requests.
        self.response_drafts: list[str] = []
        #: The drafts of tool results and retry prompts, by tool-call id, in order.
        self.tool_drafts: dict[str, list[str]] = {}
        #: Whether to note which events replay recorded work (for an event handler).
        self.watch_replays = False
        #: Tool calls of reused responses, and calls whose result was recorded before.
        self.replayed_calls: set[str] = set()
        self.replayed_results: set[str] = set()

    def streamed_request(
        self, ordinal: int, summary: dict, relay: Relay, messages: list
    ) -> tuple[Any, bool]:
        """On the step thread: model request ``ordinal`` (asked with ``messages``)
        through the ledger, its text streamed into a draft message begun now (after
        drafts for the tool results it answers, so the thread keeps their order). The
        step's ``timeout`` holds for the whole stream. Returns ``(reply, reused)``."""
        ctx = self.ctx
        try:
            self._draft_tool_messages(messages)
            draft = _Draft(ctx, ctx.begin_message("assistant"))
            self.response_drafts.append(draft.message_id)

            def call() -> Any:
                draft.text = ""  # a retried try streams the reply again from the start
                relay.start()
                try:
                    return self._follow(relay, draft, ctx.step_def.timeout)
                except BaseException:
                    relay.cancel()
                    raise

            reply, reused = self.model_request(ordinal, summary, call)
            if reused:
                self.replayed_calls.update(c["id"] for c in reply.tool_calls if c.get("id"))
                if reply.content:
                    draft.add(reply.content)
            return reply, reused
        finally:
            relay.end()

    def _follow(self, relay: Relay, draft: _Draft, timeout: float | None) -> Any:
        """Write a try's text to ``draft`` as it comes; return its reply, or raise its
        classified error (``CallTimedOut`` past ``timeout`` seconds)."""
        deadline = None if not timeout else time.monotonic() + timeout
        while True:
            try:
                attempt, kind, value = relay.to_step.get(timeout=0.25)
            except queue.Empty:
                self.ctx.check_stopped()
                if timeout and deadline is not None and time.monotonic() > deadline:
                    raise CallTimedOut(timeout) from None
                continue
            if attempt != relay.current:
                continue  # left over from a try this step already gave up on
            if kind == "event":
                if piece := _text_piece(value):
                    draft.add(piece)
            elif kind == "done":
                reply = reply_from_response(value, {})
                # The model that answered (a FallbackModel's member), priced by its name.
                reply.model = answered_by(value) or reply.model
                return reply
            else:
                raise classify(value)

    def _draft_tool_messages(self, messages: list) -> None:
        """Begin a draft for each tool result (and retry prompt) of this step in
        ``messages`` not drafted yet, counted by tool-call id (each request gets the
        conversation anew, its parts possibly copies)."""
        seen: dict[str, int] = {}
        for message in messages[self.history_len :]:
            if not isinstance(message, ModelRequest):
                continue
            for part in message.parts:
                if not isinstance(part, ToolReturnPart | RetryPromptPart):
                    continue
                if not part.tool_call_id:
                    continue
                seen[part.tool_call_id] = seen.get(part.tool_call_id, 0) + 1
                drafted = self.tool_drafts.setdefault(part.tool_call_id, [])
                if len(drafted) < seen[part.tool_call_id]:
                    drafted.append(self.ctx.begin_message("tool"))

    def model_request(self, ordinal: int, summary: dict, call) -> tuple[Any, bool]:
        """On the step thread: model request ``ordinal`` through the ledger, tried again
        by ``request_retry`` on a retryable error (waiting its backoff) without ending
        the step's attempt: another request's failure never counts against this one. A
        429 whose ``Retry-After`` is within the policy's ``max_delay`` is no failure: the
        request waits for it in ``model_calls.request`` and counts no try. A wait longer
        than the policy's ``max_delay`` is left to the step's own retry, so no worker
        waits that long.
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
                    cost_per_call_usd=self.cost_per_call_usd,
                    check=ctx.safe_point,
                    max_held_wait=self.request_retry.max_delay,
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
        self,
        call_id: str,
        name: str,
        arguments: dict,
        run_tool,
        *,
        position: int,
        approved: bool = False,
    ) -> Any:
        """On a thread of its own (the calls of one response run at once): one tool call
        through the ledger; ``run_tool()`` makes it. ``position``: the call's place
        among the run's calls with this tool-call id (``ledger.positioned``), from the
        messages, never from the order calls finish in. ``approved``: the call runs
        after a person approved it; a tool that asked for the approval itself
        (``ApprovalRequired``) has its first run recorded under the plain key, so the
        approved run gets a key of its own."""
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
        if self.watch_replays:
            op = ledger.find(ledger.positioned(key, position))
            if op is not None and op.status == Operation.Status.SUCCEEDED:
                self.replayed_results.add(call_id)
        return ctx.call_tool_keyed(
            tool, arguments, key=key, action=name, timeout=tool.timeout, position=position
        )

    def is_replayed(self, event) -> bool:
        """Whether ``event`` (of the agent's stream) replays work recorded before this
        attempt: the call of a reused response, the result of a reused call."""
        if isinstance(event, FunctionToolCallEvent):
            return event.part.tool_call_id in self.replayed_calls
        if isinstance(event, FunctionToolResultEvent):
            return event.tool_call_id in self.replayed_results
        return False


def _wait(ctx, seconds: float) -> None:
    """Wait ``seconds`` on the step thread, at a safe point every 50 ms (a lost lease or
    a cancel request ends the wait)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ctx.safe_point()
        ctx.lease_lost.wait(min(0.05, left))
    ctx.safe_point()


class FreshEvents(AbstractCapability):
    """The agent run's event stream without the events that replay work recorded before
    this attempt (``LedgerRun.is_replayed``). Added after the agent's own capabilities,
    so it filters the stream before they wrap it: every handler (the run's
    ``event_stream_handler``, an agent's ``ProcessEventStream``) gets each event once."""

    def __init__(self, ledger_run: LedgerRun):
        super().__init__()
        self.ledger_run = ledger_run

    async def wrap_run_event_stream(self, ctx, *, stream):
        async for event in stream:
            if not self.ledger_run.is_replayed(event):
                yield event


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

        # Earlier responses of the run that made a call with this id (a scripted model
        # may reuse ids): the same on every execution, whatever order calls finish in.
        position = sum(
            1
            for m in ctx.messages
            if isinstance(m, ModelResponse)
            and any(
                isinstance(p, ToolCallPart) and p.tool_call_id == call.tool_call_id for p in m.parts
            )
        )
        recorded = await run.bridge.ask(
            lambda: run.tool_call(
                call.tool_call_id,
                call.tool_name,
                arguments,
                run_tool,
                position=max(position - 1, 0),
                approved=bool(ctx.tool_call_approved),
            ),
            own_thread=True,
        )
        return outcomes.release(recorded)
