"""The deploy smoke test's workflow, registered the way a deployment registers its own
(``AGENTOPS_EXTRA_WORKFLOW_MODULES=smoke_workflow`` with this directory on
``PYTHONPATH``): the production settings leave the lab and its workflows out.

``smoke_hold``: one step that blocks on its first attempt until its worker is killed
(it stops at the next safe point if the run is cancelled) and returns
``{"attempt": n}`` at once on a later attempt."""

import time

from agentops.authoring import Workflow, register

#: How long the first attempt waits for its worker to be killed, in seconds.
HOLD_SECONDS = 3600

workflow = Workflow(
    "smoke_hold",
    version=1,
    description="Blocks on attempt 1 until its worker is killed (deploy smoke test).",
    internal=True,
)


@workflow.step()
def hold(ctx):
    if ctx.attempt == 1:
        deadline = time.monotonic() + HOLD_SECONDS
        while time.monotonic() < deadline:
            ctx.safe_point()
            time.sleep(0.05)
    return {"attempt": ctx.attempt}


register(workflow)
