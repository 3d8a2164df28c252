"""The ``sim`` model provider: the simulated model (``lab.sim.model``) behind the
engine's provider interface. Deterministic, free of network, charged
``lab.sim.model.COST_PER_CALL_USD`` per call like a paid one. The lab app registers it
as the default model (``AGENTOPS_MODEL`` empty)."""

from collections.abc import Iterator
from typing import Any

from lab.sim import model as sim_model
from runs.engine.data.model_input import token_counter
from runs.engine.effects.model_providers import ModelReply, register_provider

NAME = "sim"


class SimProvider:
    """The simulated model as a ``ModelProvider``: ``complete`` plans a tool call or
    answers from a tool result; ``stream`` yields the answer in pieces. Usage is counted
    with the configured token counter."""

    name = NAME
    cost_per_call_usd = sim_model.COST_PER_CALL_USD

    def complete(
        self, messages: list[dict[str, Any]], tools: list[Any], *, timeout: float | None = None
    ) -> ModelReply:
        names = [getattr(t, "name", t) for t in tools]
        reply = sim_model.complete(messages, names)
        return ModelReply(
            content=reply.content,
            tool_calls=reply.tool_calls,
            usage=_counted_usage(messages, reply.content),
            model=NAME,
        )

    def stream(
        self, messages: list[dict[str, Any]], *, timeout: float | None = None
    ) -> Iterator[str | ModelReply]:
        content = ""
        for piece in sim_model.stream(messages):
            content += piece
            yield piece
        yield ModelReply(content=content, usage=_counted_usage(messages, content), model=NAME)


def _counted_usage(messages: list[dict[str, Any]], reply: str) -> dict[str, int]:
    """Token usage of a simulated call, by the configured token counter."""
    count = token_counter()
    return {
        "input_tokens": sum(count(m.get("content") or "") for m in messages),
        "output_tokens": count(reply),
    }


def register() -> None:
    """Register ``sim`` with the engine as the default model. Raises ``ValueError``
    when a provider named ``sim`` is registered already."""
    register_provider(NAME, lambda name, setting: SimProvider(), default=True)
