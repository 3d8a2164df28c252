"""The demo from the product's origin story: "How warm is the living room?".

``plan`` (the simulated model decides to call the thermostat) -> ``read_temperature``
(the simulated thermostat returns 23.5 °C and logs the read) -> ``reply`` (the model
answers from the reading, streamed word by word into a draft message).
"""

import json

from agentops.authoring import Tool, Workflow, register
from lab.sim import devices

thermostat_read = Tool(
    "thermostat.read",
    fn=lambda args, call: devices.read_thermostat(
        args["room"], run_id=call.run_id, key=call.idempotency_key
    ),
    side_effect="read",
)

workflow = Workflow(
    "room_temperature",
    version=1,
    description="Ask the thermostat and answer how warm a room is.",
    input_fields={"question": str},
    message_field="question",
)


@workflow.step()
def plan(ctx):
    reply = ctx.call_model(ctx.messages(), tools=[thermostat_read.name])
    calls = [{"id": ctx.tool_call_id(i), **call} for i, call in enumerate(reply.tool_calls)]
    ctx.add_message("assistant", reply.content, tool_calls=calls)
    return {"tool_calls": calls}


@workflow.step()
def read_temperature(ctx):
    call = ctx.outputs["plan"]["tool_calls"][0]
    reading = ctx.call_tool(thermostat_read, call["arguments"])
    ctx.add_message("tool", json.dumps(reading), tool_call_id=call["id"])
    return reading


@workflow.step()
def reply(ctx):
    # The message id exists (as a draft) before generation, and the answer streams into
    # it word by word; it becomes final with this step's commit.
    message_id = ctx.begin_message("assistant")
    answer = ctx.stream_model(ctx.messages(), message_id=message_id)
    ctx.finish_message(message_id, answer.content)
    return {"answer": answer.content, "message_id": message_id}


register(workflow)
