"""``branchy`` and ``branchy_partial``: a map step for the branch tests.

``prepare`` -> ``work`` (one branch per ``input["items"]`` entry) -> ``join``. Each
branch waits until the file ``input["gate"]`` exists (at a safe point every 20 ms, so a
cancel stops it; without a gate, or for an item not in ``input["hold"]`` when that is
given, it does not wait), then calls ``test.touch``, the
outside fake, which appends ``<item>`` to the file ``input["log"]``: the test counts the
effects there. An item listed in ``input["fail"]`` (checked before the gate) raises
``DEPENDENCY_UNAVAILABLE`` (retried) on every attempt, so its branch fails after its 2
attempts. ``branchy`` fails the run then; ``branchy_partial`` joins with the other
results; ``branchy_takeover`` pauses the run for a person. A branch's compensation
appends ``undo<item>`` to the log. Registered through
``AGENTOPS_EXTRA_WORKFLOW_MODULES``."""

import os
import time

from agentops.authoring import RetryPolicy, StepError, Tool, Workflow, register


def _touch(arguments: dict, call) -> dict:
    with open(arguments["log"], "a") as log:
        log.write(f"{arguments['item']}\n")
    return {"done": arguments["item"]}


touch = Tool("test.touch", _touch, side_effect="idempotent", timeout=30)
RETRY = RetryPolicy(max_attempts=2, initial_delay=0.1, max_delay=0.2)


def _branch(ctx):
    if ctx.item in ctx.input.get("fail", []):
        raise StepError("DEPENDENCY_UNAVAILABLE", f"item {ctx.item} fails every time")
    gate = ctx.input.get("gate")
    if ctx.item not in ctx.input.get("hold", [ctx.item]):
        gate = None
    while gate and not os.path.exists(gate):
        ctx.safe_point()
        time.sleep(0.02)
    ctx.call_tool(touch, {"item": ctx.item, "log": ctx.input["log"]})
    return {"item": ctx.item, "double": ctx.item * 2}


def _undo(ctx, output) -> None:
    with open(ctx.run.input["log"], "a") as log:
        log.write(f"undo{output['item']}\n")


def _build(name: str, on_failure: str, on_exhausted: str = "fail") -> Workflow:
    workflow = Workflow(name, version=1, description="A map step (branch tests).")

    @workflow.step()
    def prepare(ctx):
        return {"count": len(ctx.input["items"])}

    workflow.map(
        "work",
        over=lambda ctx: ctx.input["items"],
        on_failure=on_failure,
        on_exhausted=on_exhausted,
        retry=RETRY,
        compensate=_undo,
    )(_branch)

    @workflow.step()
    def join(ctx):
        return {"joined": ctx.outputs["work"], "prepared": ctx.outputs["prepare"]}

    return register(workflow)


branchy = _build("branchy", "fail")
branchy_partial = _build("branchy_partial", "partial")
branchy_takeover = _build("branchy_takeover", "fail", on_exhausted="takeover")
