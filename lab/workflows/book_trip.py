"""A demo of compensation: hold a room, hold a car, tell the guest, pay, confirm.

When payment fails (input ``"card": "declined"``), the run fails and its completed
steps are compensated in reverse order: the car hold is released, then the room hold.
Telling the guest cannot be undone: it is declared ``compensable=False`` and listed for
manual review. Holds are ``idempotent`` (the booking service dedupes by key); a release
is ``unsafe`` with a ``verify`` hook that looks the hold up.
"""

from agentops.authoring import RetryPolicy, Tool, VerifyAnswer, Workflow, register
from lab.sim import devices


def _verify_release(args: dict, call) -> VerifyAnswer:
    status = devices.hold_status(args["hold_id"])
    if status == "released":
        return VerifyAnswer(
            "done",
            {"hold_id": args["hold_id"], "status": "released"},
            evidence=f"hold {args['hold_id']} is released",
        )
    if status == "held":
        return VerifyAnswer("not_done", evidence=f"hold {args['hold_id']} is still held")
    return VerifyAnswer("cannot_tell", evidence=f"hold {args['hold_id']} not found")


booking_hold = Tool(
    "booking.hold",
    fn=lambda args, call: devices.hold(
        args["kind"], args["guest"], run_id=call.run_id, key=call.idempotency_key
    ),
    side_effect="idempotent",
)
booking_release = Tool(
    "booking.release",
    fn=lambda args, call: devices.release(
        args["hold_id"], run_id=call.run_id, key=call.idempotency_key
    ),
    side_effect="unsafe",
    verify=_verify_release,
)
booking_notify = Tool(
    "booking.notify",
    fn=lambda args, call: devices.notify_guest(
        args["guest"], args["text"], run_id=call.run_id, key=call.idempotency_key
    ),
    side_effect="unsafe",
)
booking_pay = Tool(
    "booking.pay",
    fn=lambda args, call: devices.pay(
        args["card"], args["amount"], run_id=call.run_id, key=call.idempotency_key
    ),
    side_effect="idempotent",
)

workflow = Workflow(
    "book_trip",
    version=1,
    description="Hold a room and a car, tell the guest, pay; undo the holds if payment fails.",
    input_fields={"guest": str, "card": str},
)


def _release(ctx, output):
    ctx.call_tool(booking_release, {"hold_id": output["hold_id"]})


@workflow.step(compensate=_release)
def hold_room(ctx):
    return ctx.call_tool(booking_hold, {"kind": "room", "guest": ctx.input["guest"]})


@workflow.step(compensate=_release)
def hold_car(ctx):
    return ctx.call_tool(booking_hold, {"kind": "car", "guest": ctx.input["guest"]})


@workflow.step(compensable=False)
def notify_guest(ctx):
    text = (
        f"Holding room {ctx.outputs['hold_room']['hold_id']} and car "
        f"{ctx.outputs['hold_car']['hold_id']} for you."
    )
    return ctx.call_tool(booking_notify, {"guest": ctx.input["guest"], "text": text})


@workflow.step(retry=RetryPolicy(max_attempts=2, initial_delay=0.5, max_delay=2.0))
def pay(ctx):
    return ctx.call_tool(booking_pay, {"card": ctx.input["card"], "amount": 240})


@workflow.step()
def confirm(ctx):
    ctx.add_message("assistant", f"Booked for {ctx.input['guest']}.")
    return {"confirmed": True}


register(workflow)
