"""The ``storage_loop`` workflow of the payload-storage tests: one step that calls a read
tool ``TURNS`` times, each call returning ``OUTPUT_BYTES`` of text unique to the run and
turn, so every stored copy of an output is countable in bytes."""

import hashlib
from collections.abc import Iterator

import pytest

from agentops.authoring import Tool, Workflow, register
from runs.workflows import registry

TURNS = 20
OUTPUT_BYTES = 64 * 1024


def fetch(arguments, call):
    """64 KiB of text unique to the run and turn."""
    seed = f"{call.run_id}:{arguments['turn']}".encode()
    block = hashlib.sha256(seed).hexdigest()
    return {"text": (block * (OUTPUT_BYTES // len(block) + 1))[:OUTPUT_BYTES]}


@pytest.fixture
def loop_workflow() -> Iterator[Workflow]:
    """The ``storage_loop`` workflow (version 1), registered for the test and unregistered
    after it."""
    tool = Tool("storage.fetch", fn=fetch, side_effect="read")
    workflow = Workflow("storage_loop", version=1)

    @workflow.step()
    def turn(ctx):
        n = (ctx.outputs.get("turn") or {}).get("n", 0) + 1
        result = ctx.call_tool(tool, {"turn": n}, action=f"fetch-{n}")
        if n < TURNS:
            ctx.goto("turn")
        return {"n": n, "text": result["text"]}

    register(workflow)
    yield workflow
    registry.unregister("storage_loop", 1)
