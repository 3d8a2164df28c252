"""A demo of waiting for the outside world and for time: an order waits for its payment
signal, then sleeps on a durable timer, then follows up.

``ask_payment`` says what the run waits for -> ``await_payment`` waits for the signal
``payment`` (payload ``{"amount": number > 0}``; one hour, then ``remind``) ->
``schedule_followup`` sets a durable timer of ``delay_s`` seconds (input) -> ``reply``
runs when it is due. ``remind`` sends one reminder and waits again; a second hour
without payment closes the order. No worker or lease is held while the run waits or
sleeps.
"""

from agentops.authoring import MAX_SECONDS, Workflow, register

#: What a payment signal carries.
PAYMENT_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "number", "exclusiveMinimum": 0}},
    "required": ["amount"],
}
#: Seconds the run waits for a payment before a reminder (and again after it).
PAYMENT_TIMEOUT_S = 3600

workflow = Workflow(
    "order_followup",
    version=1,
    description="Wait for the payment signal, sleep delay_s seconds (a durable timer), reply.",
    input_fields={"order": str, "delay_s": int},
    input_ranges={"delay_s": (0, MAX_SECONDS)},
)


@workflow.step()
def ask_payment(ctx):
    ctx.add_message("assistant", f"Order {ctx.input['order']}: waiting for the payment.")
    return {"order": ctx.input["order"]}


@workflow.signal("payment", schema=PAYMENT_SCHEMA, timeout=PAYMENT_TIMEOUT_S, on_timeout="remind")
def await_payment(ctx):
    return None


@workflow.step()
def schedule_followup(ctx):
    amount = ctx.outputs["await_payment"]["payload"]["amount"]
    ctx.sleep(max(0, ctx.input["delay_s"]))
    return {"amount": amount, "sleep_s": max(0, ctx.input["delay_s"])}


@workflow.step(final=True)
def reply(ctx):
    amount = ctx.outputs["schedule_followup"]["amount"]
    ctx.add_message(
        "assistant", f"Order {ctx.input['order']}: paid {amount}; following up as promised."
    )
    return {"followed_up": True}


@workflow.step()
def remind(ctx):
    if "remind" in ctx.outputs:
        ctx.add_message("assistant", f"Order {ctx.input['order']}: no payment; order closed.")
        ctx.goto(None)
        return {"closed": True}
    ctx.add_message("assistant", f"Order {ctx.input['order']}: a reminder, payment is due.")
    ctx.goto("await_payment")
    return {"reminded": True}


register(workflow)
