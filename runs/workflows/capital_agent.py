"""The second example agent: per-run ``deps``, a tool that sends the model back with
``ModelRetry``, the thread's earlier messages as the agent's history, and per-run
usage limits (docs/agents.md walks it).

``capital(country)`` answers only for the customer's own country (the run's ``deps``);
asked about another one it raises ``ModelRetry`` naming the right one. Offline
(``AGENTOPS_MODEL=sim``) the model is a scripted ``FunctionModel`` that first guesses
"Atlantis", then follows the hint, then answers, saying how many earlier questions of
the thread it was given.

    runs start capital_agent --input '{"prompt": "What is my capital?",
                                       "deps": {"country": "Mexico"}}'
"""

import re
from dataclasses import dataclass

from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentops.authoring import register_agent

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Mexico": "Mexico City", "Peru": "Lima"}


@dataclass
class Customer:
    """Who the agent talks to: ``country`` is one of ``CAPITALS``'s keys."""

    country: str


agent = Agent(
    deps_type=Customer,
    instructions="Answer with the capital of the customer's country, found with capital().",
    name="capital",
)


@agent.tool(retries=2)
def capital(ctx: RunContext[Customer], country: str) -> str:
    """The capital of ``country``, which must be the customer's own."""
    if country != ctx.deps.country:
        raise ModelRetry(f"Ask about the customer's own country, {ctx.deps.country}.")
    return CAPITALS.get(country, "unknown")


def _offline(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Guess Atlantis, follow the tool's hint, then answer."""
    questions = [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    ]
    last = messages[-1]
    returned = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if not returned:
        return ModelResponse(parts=[ToolCallPart("capital", {"country": "Atlantis"})])
    if returned[-1].outcome == "retried":
        hint = re.search(r"country, (\w[\w ]*)\.", str(returned[-1].content))
        country = hint.group(1) if hint else "unknown"
        return ModelResponse(parts=[ToolCallPart("capital", {"country": country})])
    earlier = len(questions) - 1
    return ModelResponse(
        parts=[
            TextPart(
                f"The capital is {returned[-1].content} "
                f"({earlier} earlier question{'s' if earlier != 1 else ''} on this thread)."
            )
        ]
    )


workflow = register_agent(
    agent,
    name="capital_agent",
    version=1,
    description="Name the customer's capital (deps, ModelRetry, history, usage limits).",
    tools={"capital": "read"},
    run_options=("usage_limits", "model_settings", "metadata"),
    offline_model=FunctionModel(_offline),
)
