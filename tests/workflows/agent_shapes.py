"""Pydantic AI agents of common shapes, registered as workflows for the tests in
tests/test_agent_shapes.py (through ``AGENTOPS_EXTRA_WORKFLOW_MODULES``). Their model is
the deployment's (``AGENTOPS_MODEL=openai:test-model`` on the loopback model server)
unless the shape is about the agent's own model.

Every tool counts its executions in ``<AGENTOPS_DEVICE_DIR>/tool_calls.json`` (``{tool
name: count}``), so a test can tell a replayed result from a tool that ran again.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from pydantic_ai import (
    Agent,
    ApprovalRequired,
    CallDeferred,
    DeferredToolRequests,
    ModelRetry,
    RunContext,
)
from pydantic_ai.capabilities import ProcessEventStream

from agentops.authoring import RetryPolicy, register_agent

#: Fast per-request retries for the tests (the default waits 1 s, doubling).
QUICK_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.05, max_delay=5.0, jitter=0.0)


def count(tool: str) -> int:
    """Record one execution of ``tool``; returns how many there were, this one included."""
    path = Path(settings.AGENTOPS_DEVICE_DIR) / "tool_calls.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    counts = json.loads(path.read_text()) if path.exists() else {}
    counts[tool] = counts.get(tool, 0) + 1
    path.write_text(json.dumps(counts))
    return counts[tool]


# -- ModelRetry: the tool sends the model back with a hint -------------------------------

retrying = Agent(name="retrying")


@retrying.tool_plain(retries=2)
def pick_number(n: int) -> int:
    """Pick a number greater than 5."""
    count("pick_number")
    if n <= 5:
        raise ModelRetry(f"{n} is too small: pick a number greater than 5")
    return n


register_agent(
    retrying, name="shape_retry", tools={"pick_number": "read"}, request_retry=QUICK_RETRY
)

# -- ApprovalRequired: the tool decides itself that a person must approve ----------------

asking = Agent(name="asking", output_type=[str, DeferredToolRequests])


@asking.tool
def delete_file(ctx: RunContext, path: str) -> str:
    """Delete the file at ``path`` (asks for approval first)."""
    if not ctx.tool_call_approved:
        raise ApprovalRequired(metadata={"why": "deleting is permanent"})
    count("delete_file")
    return f"deleted {path}"


register_agent(asking, name="shape_approval", tools={"delete_file": "unsafe"})

# -- ordinary exceptions: a bug, and an outside system that is briefly away --------------

failing = Agent(name="failing")


@failing.tool_plain
def buggy_lookup(key: str) -> str:
    """Look ``key`` up (a bug: always raises KeyError)."""
    count("buggy_lookup")
    return {}[key]


@failing.tool_plain
def flaky_lookup(key: str) -> str:
    """Look ``key`` up; the outside system refuses the first connection."""
    if count("flaky_lookup") == 1:
        raise ConnectionError("connection refused")
    return f"value of {key}"


register_agent(
    failing,
    name="shape_tool_errors",
    tools={"buggy_lookup": "read", "flaky_lookup": "read"},
    request_retry=QUICK_RETRY,
)

# -- deps, history, per-run options ------------------------------------------------------


@dataclass
class Customer:
    """The agent's deps: who it talks to."""

    country: str
    vip: bool = False


helping = Agent(name="helping", deps_type=Customer)


@helping.tool
def capital(ctx: RunContext[Customer]) -> str:
    """The capital of the customer's country."""
    count("capital")
    return {"Mexico": "Mexico City", "France": "Paris"}.get(ctx.deps.country, "unknown")


register_agent(
    helping,
    name="shape_deps",
    tools={"capital": "read"},
    run_options=("model", "model_settings", "usage_limits", "metadata"),
    request_retry=QUICK_RETRY,
)

looping = Agent(name="looping")


@looping.tool_plain
def again() -> str:
    """Call me again."""
    count("again")
    return "call again"


register_agent(
    looping,
    name="shape_loop",
    tools={"again": "read"},
    run_options=("usage_limits",),
    request_retry=QUICK_RETRY,
)

# -- structured output: a model that keeps answering out of shape ------------------------

register_agent(
    Agent(name="counting", output_type=int, retries=1),
    name="shape_output",
    request_retry=QUICK_RETRY,
)

# -- the agent's own model ---------------------------------------------------------------


def chat_model(name: str):
    """An OpenAI chat-completions model object of the agent's own, on the loopback server."""
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(
        base_url=settings.OPENAI_BASE_URL, api_key=settings.OPENAI_API_KEY, max_retries=0
    )
    return OpenAIChatModel(name, provider=OpenAIProvider(openai_client=client))


register_agent(Agent(chat_model("own-model"), name="own"), name="shape_own_model")


def _fallback_agent() -> Agent:
    from pydantic_ai.models.fallback import FallbackModel

    return Agent(FallbackModel(chat_model("primary"), chat_model("backup")), name="fallback")


register_agent(_fallback_agent(), name="shape_fallback")

# -- an MCP toolset (a server over stdio, tests/support/mcp_server.py) -------------------


def _mcp_agent() -> Agent:
    import sys

    from fastmcp.client import Client
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai.mcp import MCPToolset

    transport = StdioTransport(
        sys.executable, ["-m", "tests.support.mcp_server"], cwd=str(settings.BASE_DIR)
    )
    return Agent(name="mcp", toolsets=[MCPToolset(Client(transport))])


register_agent(_mcp_agent(), name="shape_mcp", tools={"add": "read"})


# -- an event stream handler -------------------------------------------------------------


def _event_writer(file_name: str):
    """An event stream handler appending each part that starts in a model response
    (``part:<kind>``), each tool call (``call:<id>``) and each tool result
    (``result:<id>``) to ``file_name`` in the device directory."""

    async def write(ctx, events) -> None:
        from pydantic_ai.messages import (
            FunctionToolCallEvent,
            FunctionToolResultEvent,
            PartStartEvent,
        )

        path = Path(settings.AGENTOPS_DEVICE_DIR) / file_name
        path.parent.mkdir(parents=True, exist_ok=True)
        async for event in events:
            if isinstance(event, PartStartEvent):
                seen = f"part:{event.part.part_kind}"
            elif isinstance(event, FunctionToolCallEvent):
                seen = f"call:{event.part.tool_call_id}"
            elif isinstance(event, FunctionToolResultEvent):
                seen = f"result:{event.tool_call_id}"
            else:
                continue
            with path.open("a") as out:
                out.write(json.dumps({"event": seen}) + "\n")

    return write


register_agent(
    looping,
    name="shape_events",
    tools={"again": "read"},
    event_stream_handler=_event_writer("shape_events.jsonl"),
)

# The same handler as the agent's own capability rather than given to register_agent.
register_agent(
    Agent(
        name="own_handler",
        tools=[again],
        capabilities=[ProcessEventStream(_event_writer("shape_events_own.jsonl"))],
    ),
    name="shape_events_own",
    tools={"again": "read"},
)


# -- parallel tool calls: each waits at an outside gate ----------------------------------

gating = Agent(name="gating")


@gating.tool_plain
async def fetch(name: str) -> str:
    """Fetch ``name`` from the outside service (``SHAPES_GATE_URL``), which answers when
    the test lets it."""
    import httpx

    async with httpx.AsyncClient() as client:
        reply = await client.get(os.environ["SHAPES_GATE_URL"], params={"name": name}, timeout=120)
    return reply.text


register_agent(gating, name="shape_parallel", tools={"fetch": "read"}, request_retry=QUICK_RETRY)


# -- CallDeferred: an outside system delivers the result later ---------------------------

exporting = Agent(name="exporting", output_type=[str, DeferredToolRequests])


@exporting.tool_plain
def start_export(report: str) -> str:
    """Export ``report``; the export service answers later."""
    count("start_export")
    raise CallDeferred(metadata={"queue": "exports"})


register_agent(exporting, name="shape_deferred", tools={"start_export": "unsafe"})
register_agent(
    exporting,
    name="shape_deferred_timeout",
    tools={"start_export": "unsafe"},
    deferred_timeout=60,
)
