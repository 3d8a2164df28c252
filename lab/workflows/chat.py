"""``chat``: a conversation turn on a long-lived thread, the demo for context assembly.

``summarize`` (when the uncovered history passed the configured size, the simulated
model writes an extractive summary; a crash here is recovered like in any step) ->
``plan`` (the model, given the assembled context, decides to read the thermostat) ->
``read_temperature`` (the tool call, its result stored next to its call id) -> ``reply``
(the answer, also saved as the artifact ``answer.md``).

Input: ``{"message": str}``; optional ``"hold": NAME`` makes ``plan`` wait (checking
for cancellation) until the simulated outside world opens the gate ``NAME`` (a file
``<AGENTOPS_DEVICE_DIR>/gates/NAME``), so drills can act while a run is in progress.
"""

import json
import time
from pathlib import Path

from django.conf import settings

from agentops.authoring import Workflow, register
from lab.sim import model as sim_model
from lab.workflows.room_temperature import thermostat_read

SYSTEM = "You are the AgentOps home assistant. Answer from tool results; never guess a reading."

workflow = Workflow(
    "chat",
    version=1,
    description="Answer a message on a long thread, summarising older history when needed.",
    input_fields={"message": str},
    message_field="message",
)


def gate_path(name: str) -> Path:
    """The file whose existence opens the simulated gate ``name``."""
    return Path(settings.AGENTOPS_DEVICE_DIR) / "gates" / name


def open_gate(name: str) -> None:
    """Open the gate ``name`` (what a drill does to let a held run continue)."""
    path = gate_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


@workflow.step()
def summarize(ctx):
    plan = ctx.summary_due()
    if plan is None:
        return {"summary": None}
    previous = plan.previous.content if plan.previous else ""
    content = sim_model.summarize(previous, plan.new_messages)
    ctx.add_summary(plan, content)
    return {"summary": {"covers": [1, plan.last_seq]}}


@workflow.step(options={"system": SYSTEM})
def plan(ctx):
    hold = ctx.input.get("hold")
    while hold and not gate_path(hold).exists():
        ctx.safe_point()
        time.sleep(0.05)
    reply = ctx.call_model(ctx.messages(), tools=[thermostat_read.name])
    calls = [{"id": ctx.tool_call_id(i), **call} for i, call in enumerate(reply.tool_calls)]
    ctx.add_message("assistant", reply.content, tool_calls=calls)
    return {"tool_calls": calls}


@workflow.step()
def read_temperature(ctx):
    for call in ctx.outputs["plan"]["tool_calls"]:
        reading = ctx.call_tool(thermostat_read, call["arguments"], action=call["id"])
        ctx.add_message("tool", json.dumps(reading), tool_call_id=call["id"])
    return {"calls": len(ctx.outputs["plan"]["tool_calls"])}


@workflow.step(options={"system": SYSTEM})
def reply(ctx):
    answer = ctx.call_model(ctx.messages())
    ctx.add_message("assistant", answer.content)
    artifact = ctx.save_artifact("answer.md", answer.content, kind="answer")
    return {"answer": answer.content, "artifact": artifact.uri}


register(workflow)
