"""Agents in a deployment: one whose model is the loopback OpenAI-compatible server
(``tests/support/openai_server.py``), and what the tests read of the model's requests."""

import json
from collections.abc import Callable

from tests.support.openai_server import ModelServer
from tests.support.services import Deployment

#: The fake model's price (USD per million tokens), so runs record a cost.
PRICE = {"openai:test-model": {"input": "1.00", "output": "2.00"}}
#: The environment that loads the agent shapes (tests/workflows/agent_shapes.py).
SHAPES = {"AGENTOPS_EXTRA_WORKFLOW_MODULES": "tests.workflows.agent_shapes"}


def deployment(
    deployment_factory, server: ModelServer, backend: str = "sqlite", **extra
) -> Deployment:
    """A deployment (``backend``, SQLite by default) whose model is ``server``, the
    loopback OpenAI-compatible fake, priced at ``PRICE``; short leases and polls, and
    ``extra`` environment variables on top."""
    return deployment_factory(
        backend,
        extra_env={
            "AGENTOPS_MODEL": "openai:test-model",
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "test-key",
            "AGENTOPS_MODEL_PRICES": json.dumps(PRICE),
            "AGENTOPS_LEASE_SECONDS": 2,
            "AGENTOPS_POLL_SECONDS": 0.1,
            **extra,
        },
    )


def tool_results(body: dict) -> list[str]:
    """The contents of the tool messages an OpenAI request carries, oldest first."""
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def tool_call(name: str, arguments: dict, call_id: str | None = None) -> dict:
    """The fake model's answer that asks for tool ``name`` with ``arguments``."""
    return {"tool_calls": [{"name": name, "arguments": arguments, "id": call_id}]}


def tool_then_answer(
    name: str,
    arguments: dict,
    call_id: str | None = None,
    answer: Callable[[str], str] = lambda result: result,
) -> Callable[[dict], dict]:
    """A fake model (a ``ModelServer`` reply function) that asks for tool ``name`` once,
    then answers ``answer(the last tool result)``."""

    def reply(body: dict) -> dict:
        if not tool_results(body):
            return tool_call(name, arguments, call_id)
        return {"content": answer(tool_results(body)[-1])}

    return reply
