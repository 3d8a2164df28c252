"""Model providers: every model Pydantic AI supports, named its way (``openai:gpt-4.1-mini``,
``anthropic:...``). An OpenAI-compatible server (vLLM, Ollama, LM Studio) is reached
through ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (or ``OPENAI_API_KEY_FILE``).

The SDK's own retries are off (``max_retries=0``): a failed request is a failed attempt
of the step, retried by the step's policy with the provider's ``Retry-After`` honoured,
so a retry never hides behind a step's lease and every request is in the ledger.

Every request runs on the process's event loop (``aio``) through one long-lived OpenAI
client per base URL and key (``openai_client``), whose connections are kept between
requests: a worker's slots share it, so a request costs neither a new loop, nor a new
client, nor a new connection.
"""

import re
import threading
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from runs.agents.errors import classify, invalid_tool_call
from runs.engine.effects.model_providers import ModelReply, register_provider
from runs.engine.execution import aio
from runs.engine.execution.slots import MAX_SLOTS
from runs.engine.state import values

_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")

#: The shared OpenAI clients, by (event loop, base URL, API key).
_clients: dict[tuple, Any] = {}
_clients_lock = threading.Lock()
#: The shared ``OpenAIChatModel`` objects, by (id of their client, model name).
_models: dict[tuple, Any] = {}


def openai_client(base_url: str | None, api_key: str | None):
    """The process's ``openai.AsyncOpenAI`` for ``base_url`` (``None``: OpenAI's) and
    ``api_key`` (``None``: openai reads ``OPENAI_API_KEY`` itself), created on first use
    on the process's event loop (``aio``) and used only there. Safe to call from many
    threads at once, and from that loop.

    Its connection pool has no cap on connections (a slot has one request in flight at
    a time, so the slots bound them) and keeps up to ``MAX_SLOTS`` idle ones, so a
    worker's slots reuse their connections instead of opening one per request. No
    timeout is set on the client: each request passes its own."""
    key = (aio.loop(), base_url, api_key)
    client = _clients.get(key)
    if client is not None:
        return client
    if aio.on_loop():
        return _get_or_create(key)

    async def on_the_loop():
        return _get_or_create(key)

    return aio.run(on_the_loop())


def _get_or_create(key: tuple):
    """The client for ``key``, created if missing. Runs on the loop's one thread, so no
    two callers create one for the same key."""
    if key not in _clients:
        # openai's clients are httpx2's (its own dependency), so the limits are too.
        import httpx2
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        _, base_url, api_key = key
        limits = httpx2.Limits(max_connections=None, max_keepalive_connections=MAX_SLOTS)
        client = AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            max_retries=0,
            http_client=DefaultAsyncHttpxClient(limits=limits),
        )
        with _clients_lock:
            _clients[key] = client
    return _clients[key]


def _openai_model(model_name: str):
    """The process's ``OpenAIChatModel`` for ``model_name`` on the shared client
    (``openai_client``) of the configured base URL and key. Built once: building one
    looks the model's profile up in Pydantic AI's price tables, a few milliseconds of
    CPU that every request of every slot would otherwise pay. It keeps no state per
    request, so the slots' requests share it."""
    client = openai_client(settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY)
    key = (id(client), model_name)
    model = _models.get(key)
    if model is None or model.client is not client:
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        model = OpenAIChatModel(model_name, provider=OpenAIProvider(openai_client=client))
        with _clients_lock:
            _models[key] = model
    return model


class PydanticAIProvider:
    """Any model Pydantic AI supports, asked through ``pydantic_ai.direct`` on the
    process's event loop. ``model()`` builds a ``pydantic_ai`` model; an ``openai:``
    one uses the shared client (``openai_client``), anything else gets its own: close
    it with ``aclose(model)`` (which leaves a shared client open)."""

    def __init__(self, model_name: str, setting: str):
        self.name = model_name
        self.setting = setting
        self._check()

    def _check(self) -> None:
        prefix = self.name.split(":", 1)[0]
        if prefix == "openai":
            if not settings.OPENAI_API_KEY:
                raise ImproperlyConfigured(
                    f"OPENAI_API_KEY (or OPENAI_API_KEY_FILE) must be set for "
                    f"{self.setting}={self.name!r} (any value for a local server that "
                    "ignores it)"
                )
            return
        # Other providers check their SDK and key when the model is built; nothing is
        # sent (and nothing awaited: start-up may run inside an ASGI server's loop).
        self.model()

    def model(self):
        """A new ``pydantic_ai.models.Model`` for this name. Raises ``ImproperlyConfigured``
        naming the setting when Pydantic AI does not know the provider or misses its
        key or SDK."""
        from pydantic_ai.exceptions import UserError
        from pydantic_ai.models import infer_model

        if self.name.startswith("openai:"):
            return _openai_model(self.name.split(":", 1)[1])
        try:
            return infer_model(self.name)
        except (UserError, ImportError, ValueError) as exc:
            raise ImproperlyConfigured(f"{self.setting}={self.name!r}: {exc}") from exc

    def warm(self) -> None:
        """Import Pydantic AI's request path and, for an ``openai:`` model, build the
        shared client and model (``_openai_model``), so a worker's first request pays for
        neither. Raises what ``model`` raises."""
        import pydantic_ai.direct  # noqa: F401 - the import is the warming

        if self.name.startswith("openai:"):
            self.model()

    def complete(
        self, messages: list[dict[str, Any]], tools: list[Any], *, timeout: float | None = None
    ) -> ModelReply:
        """One request; ``timeout`` (seconds) is the HTTP client's limit for it."""
        return aio.run(self._complete(messages, tools, timeout))

    async def _complete(
        self, messages: list[dict[str, Any]], tools: list[Any], timeout: float | None
    ) -> ModelReply:
        from pydantic_ai.direct import model_request
        from pydantic_ai.models import ModelRequestParameters

        definitions, names = tool_definitions(tools)
        model = self.model()
        try:
            response = await model_request(
                model,
                to_pydantic_messages(messages),
                model_settings=request_settings(timeout),
                model_request_parameters=ModelRequestParameters(function_tools=definitions),
            )
        except Exception as exc:  # noqa: BLE001 - every provider failure gets a code
            raise classify(exc) from exc
        finally:
            await aclose(model)
        return reply_from_response(response, names)

    def stream(
        self, messages: list[dict[str, Any]], *, timeout: float | None = None
    ) -> Iterator[str | ModelReply]:
        """Text pieces as the provider streams them, then the final reply. The stream is
        read on the process's event loop, piece by piece as this thread asks for them.
        ``timeout`` (seconds) is the HTTP client's limit for the request."""
        model = self.model()
        agen = self._stream(model, messages, timeout)
        try:
            while True:
                try:
                    piece = aio.run(_next(agen))
                except StopAsyncIteration:
                    return
                yield piece
        finally:
            aio.run(agen.aclose())
            aio.run(aclose(model))

    async def _stream(self, model, messages: list[dict[str, Any]], timeout: float | None):
        from pydantic_ai.direct import model_request_stream
        from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta

        try:
            async with model_request_stream(
                model, to_pydantic_messages(messages), model_settings=request_settings(timeout)
            ) as stream:
                async for event in stream:
                    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                        if event.part.content:
                            yield event.part.content
                    elif isinstance(event, PartDeltaEvent) and isinstance(
                        event.delta, TextPartDelta
                    ):
                        if event.delta.content_delta:
                            yield event.delta.content_delta
                response = stream.get()
        except Exception as exc:  # noqa: BLE001 - every provider failure gets a code
            raise classify(exc) from exc
        yield reply_from_response(response, {})


async def _next(agen):
    return await agen.__anext__()


def request_settings(timeout: float | None, base: Any = None) -> Any:
    """Pydantic AI ``ModelSettings`` for one request: ``base`` (a mapping or ``None``)
    with ``timeout`` (seconds) as the HTTP client's limit, per request, so a client
    shared by many requests keeps its own default for the others. ``None`` for
    ``timeout``: ``base`` unchanged."""
    if timeout is None:
        return base
    return {**(base or {}), "timeout": float(timeout)}


async def aclose(model) -> None:
    """Close the HTTP client of a model built by ``PydanticAIProvider.model``, unless it
    is a shared one (``openai_client``), which lives as long as the process."""
    client = getattr(getattr(model, "provider", None), "client", None)
    with _clients_lock:
        if any(client is shared for shared in _clients.values()):
            return
    close = getattr(client, "close", None)
    if close is not None:
        await close()


def tool_definitions(tools: list[Any]):
    """``(ToolDefinition list, {sent name: tool name})`` for engine tools (``Tool``
    objects or names). Names are made safe for every provider (``thermostat.read`` is
    sent as ``thermostat_read``) and mapped back in the reply."""
    from pydantic_ai.tools import ToolDefinition

    definitions, names = [], {}
    for tool in tools:
        name = getattr(tool, "name", tool)
        sent = _NAME_UNSAFE.sub("_", name)
        names[sent] = name
        definitions.append(
            ToolDefinition(
                name=sent,
                description=getattr(tool, "description", "") or None,
                parameters_json_schema=getattr(tool, "parameters", None)
                or {"type": "object", "additionalProperties": True},
            )
        )
    return definitions, names


def to_pydantic_messages(messages: list[dict[str, Any]]) -> list:
    """Engine messages (``{"role", "content", "tool_calls", "tool_call_id"}``) as Pydantic
    AI messages; a tool result carries the name of the call it answers."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    out: list = []
    call_names: dict[str, str] = {}
    for m in messages:
        role, content = m.get("role"), m.get("content") or ""
        if role == "system":
            out.append(ModelRequest(parts=[SystemPromptPart(content)]))
        elif role == "user":
            out.append(ModelRequest(parts=[UserPromptPart(content)]))
        elif role == "assistant":
            parts: list = [TextPart(content)] if content else []
            for call in m.get("tool_calls") or []:
                name = _NAME_UNSAFE.sub("_", call["name"])
                call_names[call.get("id") or ""] = name
                parts.append(ToolCallPart(name, call.get("arguments") or {}, call.get("id")))
            out.append(ModelResponse(parts=parts or [TextPart("")]))
        elif role == "tool":
            call_id = m.get("tool_call_id") or ""
            out.append(
                ModelRequest(
                    parts=[ToolReturnPart(call_names.get(call_id, "tool"), content, call_id)]
                )
            )
    return out


def reply_from_response(response, names: dict[str, str]) -> ModelReply:
    """A ``pydantic_ai`` ``ModelResponse`` as an engine ``ModelReply`` (tool names mapped
    back through ``names``). Raises ``StepError("MODEL_RESPONSE_INVALID")`` (with a
    takeover) for a tool call whose arguments are not a JSON object."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter, TextPart, ToolCallPart

    raw = ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]
    text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
    calls = []
    for part in response.parts:
        if not isinstance(part, ToolCallPart):
            continue
        arguments = part.args
        if isinstance(arguments, str):
            try:
                arguments = values.parse_json(arguments) if arguments.strip() else {}
            except values.InvalidJson:
                arguments = None
        if not isinstance(arguments, dict):
            raise invalid_tool_call(part.tool_name, part.args, raw)
        calls.append(
            {
                "id": part.tool_call_id,
                "name": names.get(part.tool_name, part.tool_name),
                "arguments": arguments,
            }
        )
    return ModelReply(
        content=text,
        tool_calls=calls,
        usage={
            "input_tokens": int(response.usage.input_tokens or 0),
            "output_tokens": int(response.usage.output_tokens or 0),
        },
        model=response.model_name or "",
        raw=raw,
    )


def register() -> None:
    """Register Pydantic AI's models (every prefix not registered by name) with the
    engine."""
    register_provider("*", PydanticAIProvider)
