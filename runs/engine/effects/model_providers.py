"""The model-provider interface the engine knows.

The engine imports no provider SDK and no simulator: providers register a factory per
prefix of a model name when their app starts (``runs.agents``: every Pydantic AI
provider; the lab: ``sim``, its offline simulator). A model name is written the
Pydantic AI way, ``<provider>:<model>`` (``openai:gpt-4.1-mini``), or is the bare name
of a provider registered under it (``sim``).
"""

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from runs.engine.errors import ModelNotConfigured

logger = logging.getLogger("agentops.worker")


@dataclass
class ModelReply:
    """One model response.

    ``content``: the assistant's text. ``tool_calls``: ``[{"id", "name", "arguments"}]``
    (``arguments`` a dict; ``id`` missing when the provider gives none, as the simulator).
    ``usage``: ``{"input_tokens": int, "output_tokens": int}``. ``model``: the model name
    that answered. ``cost_usd``: the cost in USD as a decimal string when the provider
    knows it (the simulator's fixed price), else ``None`` (the price setting decides).
    ``raw``: the provider's own record of the response (JSON), kept on the operation.
    """

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    model: str = ""
    cost_usd: str | None = None
    raw: Any = None

    def as_record(self) -> dict[str, Any]:
        """The JSON shape stored as the model operation's result."""
        return {
            "content": self.content,
            "tool_calls": self.tool_calls,
            "usage": self.usage,
            "model": self.model,
            "cost_usd": self.cost_usd,
            "raw": self.raw,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "ModelReply":
        """The reply stored by ``as_record``."""
        return cls(
            content=record.get("content") or "",
            tool_calls=list(record.get("tool_calls") or []),
            usage=dict(record.get("usage") or {"input_tokens": 0, "output_tokens": 0}),
            model=record.get("model") or "",
            cost_usd=record.get("cost_usd"),
            raw=record.get("raw"),
        )


class ModelProvider(Protocol):
    """What a provider offers the engine. Both methods run outside any transaction and
    raise ``StepError`` with a classified code (``RATE_LIMITED`` and
    ``DEPENDENCY_UNAVAILABLE`` with ``retry_after``, ``MODEL_REQUEST_INVALID``,
    ``MODEL_AUTH``, ``MODEL_RESPONSE_INVALID``, ``TIMEOUT``)."""

    name: str

    def complete(
        self, messages: list[dict[str, Any]], tools: list[Any], *, timeout: float | None = None
    ) -> ModelReply:
        """Answer ``messages`` (``[{"role", "content", "tool_calls", "tool_call_id"}]``);
        ``tools`` are ``runs.tools.Tool`` objects or tool names the model may call.
        ``timeout``: seconds the request may take (``None``: the client's default); a
        provider that talks to a server gives it to its HTTP client, so a request the
        engine abandoned does not run on."""
        ...

    def stream(
        self, messages: list[dict[str, Any]], *, timeout: float | None = None
    ) -> Iterator[str | ModelReply]:
        """Answer ``messages`` with text only: yield text pieces as they arrive (they join
        to the whole reply), then the final ``ModelReply`` (with usage) last.
        ``timeout`` as for ``complete``."""
        ...


#: Provider factories by prefix: ``factory(model_name, setting) -> ModelProvider``;
#: raises ``ImproperlyConfigured`` naming the setting it misses (a key) or ``setting``.
#: The prefix ``*`` serves every ``<prefix>:<model>`` nobody registered (Pydantic AI's
#: own list); a bare name (no ``:``) needs a provider registered under it.
_factories: dict[str, Callable[[str, str], ModelProvider]] = {}
_providers: dict[str, ModelProvider] = {}
#: The model of runs that name none when ``AGENTOPS_MODEL`` is empty: a provider
#: registered with ``default=True`` (the lab's offline simulator), else none.
_default: list[str] = []


def register_provider(
    prefix: str, factory: Callable[[str, str], ModelProvider], *, default: bool = False
) -> None:
    """Make model names ``<prefix>`` and ``<prefix>:<model>`` resolve through ``factory``;
    ``default``: ``<prefix>`` is the model when ``AGENTOPS_MODEL`` is empty. Raises
    ``ValueError`` for a prefix registered twice, or a second default."""
    if prefix in _factories:
        raise ValueError(f"model provider {prefix!r} registered twice")
    if default and _default:
        raise ValueError(f"default model {_default[0]!r} registered, not also {prefix!r}")
    _factories[prefix] = factory
    if default:
        _default.append(prefix)
    _providers.clear()


def default_model() -> str:
    """The model of a run, step and workflow that name none: ``AGENTOPS_MODEL``, else
    the provider registered with ``default=True``. Raises ``ModelNotConfigured`` (a
    step error that pauses the run for a takeover) when neither is there."""
    name = settings.AGENTOPS_MODEL or (_default[0] if _default else "")
    if not name:
        raise ModelNotConfigured(
            "AGENTOPS_MODEL is empty and no installed app registers a default model: "
            "set AGENTOPS_MODEL (e.g. openai:gpt-4.1-mini)"
        )
    return name


def get_provider(model_name: str, setting: str = "AGENTOPS_MODEL") -> ModelProvider:
    """The provider for ``model_name`` (cached per name). Raises ``ImproperlyConfigured``
    naming ``setting`` (where the name came from) for an unknown provider, or whatever
    the factory raises for a missing key."""
    provider = _providers.get(model_name)
    if provider is not None:
        return provider
    prefix = model_name.split(":", 1)[0].strip()
    factory = _factories.get(prefix)
    if factory is None and ":" in model_name:
        factory = _factories.get("*")
    if not prefix or factory is None:
        known = ", ".join(sorted(p for p in _factories if p != "*")) or "none"
        raise ImproperlyConfigured(
            f"{setting}={model_name!r}: unknown model provider {prefix!r} (registered by "
            f"name: {known}; any other is written <provider>:<model>)"
        )
    provider = factory(model_name, setting)
    _providers[model_name] = provider
    return provider


def warm(model_name: str) -> bool:
    """Load what requests to ``model_name`` need (its SDK's modules, a shared client)
    before the first step asks, when its provider offers ``warm()``: importing an SDK
    takes seconds of CPU, which on the first request would stall every request of the
    process behind it. Returns True when warmed; False when the provider has nothing to
    warm or cannot be made (an unknown name or a missing key: each step that asks says
    so, as it would have). Never raises."""
    try:
        warm_provider = getattr(get_provider(model_name), "warm", None)
        if warm_provider is None:
            return False
        warm_provider()
    except Exception as exc:  # noqa: BLE001 - a step asking later reports it in full
        logger.warning("could not prepare model %s: %s: %s", model_name, type(exc).__name__, exc)
        return False
    return True
