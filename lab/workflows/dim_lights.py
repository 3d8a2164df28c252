"""The demo of the dangerous case from the product's origin story: "lower the
brightness by 10%".

``read_lamp`` (reads 80) -> ``plan`` (the simulated model turns "lower by 10%" into the
absolute target 70) -> ``set_brightness`` (the unsafe call: the lamp has no idempotency
keys, so a blind retry after a crash would set 70 again at best, or lower twice to 60 if
the plan were relative) -> ``reply``.

The set is an absolute target and its ``verify`` hook reads the lamp: at the target
means done, still at the previous value means not done, anything else (or an unreadable
lamp) means cannot tell, and the run pauses for a human. Its compensation restores the
previous brightness if the run later fails or is cancelled.
"""

import json

from agentops.authoring import RetryPolicy, Tool, VerifyAnswer, Workflow, register
from lab import injection
from lab.sim import devices


def _verify_set(args: dict, call) -> VerifyAnswer:
    """Did a ``lamp.set_brightness`` to ``args["brightness"]`` take effect?"""
    target, previous = args["brightness"], args.get("previous")
    try:
        now = devices.get_lamp_brightness(
            run_id=call.run_id, key=call.idempotency_key, purpose="verify"
        )["brightness"]
    except Exception as exc:  # noqa: BLE001 - an unreadable lamp cannot confirm anything
        return VerifyAnswer("cannot_tell", evidence=f"lamp did not answer a read: {exc}")
    if now == target:
        return VerifyAnswer(
            "done",
            {"brightness": target, "previous": previous},
            evidence=f"lamp reads {now}%, the target of the interrupted call",
        )
    if now == previous:
        return VerifyAnswer(
            "not_done", evidence=f"lamp still reads {now}%, the value before the interrupted call"
        )
    before = f"the previous {previous}%" if previous is not None else "a recorded previous value"
    return VerifyAnswer(
        "cannot_tell",
        evidence=f"lamp reads {now}%: neither the target {target}% nor {before}",
    )


lamp_get = Tool(
    "lamp.get_brightness",
    fn=lambda args, call: devices.get_lamp_brightness(run_id=call.run_id, key=call.idempotency_key),
    side_effect="read",
    timeout=10,
)
lamp_set = Tool(
    "lamp.set_brightness",
    fn=lambda args, call: devices.set_lamp_brightness(
        args["brightness"],
        run_id=call.run_id,
        key=call.idempotency_key,
        unreadable_after=bool(injection.armed(call.run_id, "lamp_unreadable")),
    ),
    side_effect="unsafe",
    verify=_verify_set,
    timeout=10,
)

workflow = Workflow(
    "dim_lights",
    version=1,
    description="Read the lamp, plan a change, set an absolute brightness once, reply.",
    input_fields={"request": str},
    message_field="request",
)


@workflow.step(
    retry=RetryPolicy(max_attempts=3, initial_delay=1.0, max_delay=10.0), on_exhausted="fail"
)
def read_lamp(ctx):
    call_id = ctx.tool_call_id(0)
    ctx.add_message(
        "assistant", "", tool_calls=[{"id": call_id, "name": lamp_get.name, "arguments": {}}]
    )
    reading = ctx.call_tool(lamp_get, {})
    ctx.add_message("tool", json.dumps(reading), tool_call_id=call_id)
    return reading


@workflow.step()
def plan(ctx):
    reply = ctx.call_model(ctx.messages(), tools=[lamp_set.name])
    calls = [{"id": ctx.tool_call_id(i), **call} for i, call in enumerate(reply.tool_calls)]
    ctx.add_message("assistant", reply.content, tool_calls=calls)
    if not calls:
        ctx.goto(None)
    return {"tool_calls": calls}


def _restore(ctx, output):
    """Compensation: put the lamp back to where it was before this run changed it."""
    if output:
        ctx.call_tool(
            lamp_set,
            {"brightness": output["previous"], "previous": output["brightness"]},
            action="restore",
        )


@workflow.step(
    retry=RetryPolicy(max_attempts=3, initial_delay=1.0, max_delay=10.0),
    on_exhausted="takeover",
    timeout=10,
    compensate=_restore,
)
def set_brightness(ctx):
    call = ctx.outputs["plan"]["tool_calls"][0]
    previous = ctx.outputs["read_lamp"]["brightness"]
    target = call["arguments"]["brightness"]
    result = ctx.call_tool(lamp_set, {"brightness": target, "previous": previous}) or {}
    # An operator's "done" may come without the lamp's own answer: the target stands.
    outcome = {"brightness": result.get("brightness", target), "previous": previous}
    ctx.add_message("tool", json.dumps(outcome), tool_call_id=call["id"])
    return outcome


@workflow.step()
def reply(ctx):
    answer = ctx.call_model(ctx.messages())
    ctx.add_message("assistant", answer.content)
    return {"answer": answer.content}


register(workflow)
