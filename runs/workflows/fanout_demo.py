"""The demo of parallel branches: ``fetch`` fans out into one branch per item, each
waiting ``delay_s`` seconds in a simulated outside call (through the operation ledger,
keyed by the branch's position) and returning the item's square; ``combine`` (the
join) returns their sum once every branch has finished.

Input ``{"items": N, "delay_s": S}``: the items are 1..N (N from 0 to
``MAX_BRANCHES``), S from 0 to 60 seconds; anything else is refused at start.
"""

import time

from agentops.authoring import MAX_BRANCHES, Tool, Workflow, register


def _square(args: dict, call) -> dict:
    # The outside call: it takes delay_s seconds, as a slow API would.
    time.sleep(args["delay_s"])
    return {"square": args["item"] ** 2}


square = Tool("demo.square", fn=_square, side_effect="read", timeout=120)

workflow = Workflow(
    "fanout_demo",
    version=1,
    description="Fan out over N items in parallel branches (each waits S seconds), then sum",
    input_fields={"items": int, "delay_s": (int, float)},
    input_ranges={"items": (0, MAX_BRANCHES), "delay_s": (0, 60)},
)


@workflow.map(over=lambda ctx: list(range(1, ctx.input["items"] + 1)))
def fetch(ctx):
    return ctx.call_tool(square, {"item": ctx.item, "delay_s": ctx.input["delay_s"]})["square"]


@workflow.step()
def combine(ctx):
    squares = ctx.outputs["fetch"]
    return {"items": len(squares), "sum": sum(squares)}


register(workflow)
