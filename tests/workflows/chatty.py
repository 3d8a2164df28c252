"""``chatty``: one step that logs and prints as ``input`` says, for the attempt-log
tests: lines tagged ``input["tag"]`` through ``logging``, stdout, stderr and a tool;
with ``input["gate"]`` (a file path) it creates ``<gate>.<tag>`` and keeps writing
until the gate exists (so two steps are in flight in one worker at once);
``input["flood_bytes"]`` prints that many bytes; ``input["fail"]`` raises after
writing. Registered through ``AGENTOPS_EXTRA_WORKFLOW_MODULES``."""

import logging
import os
import sys
import time

from agentops.authoring import Tool, Workflow, register

logger = logging.getLogger("chatty.step")


def _shout(arguments: dict, call) -> dict:
    print(f"tool says {arguments['tag']}")
    logging.getLogger("chatty.tool").warning("tool logs %s", arguments["tag"])
    return {"ok": True}


shout = Tool("test.shout", _shout, side_effect="read", timeout=30)

workflow = Workflow("chatty", version=1, description="Logs and prints (attempt-log tests).")


@workflow.step()
def speak(ctx):
    tag = ctx.input["tag"]
    logger.warning("logged %s", tag)
    print(f"printed {tag}")
    print(f"stderr {tag}", file=sys.stderr)
    print("nul \x00 here")
    ctx.call_tool(shout, {"tag": tag})
    gate = ctx.input.get("gate")
    n = 0
    if gate:
        # Tells the test this step is writing, so both are in flight when it opens the gate.
        open(f"{gate}.{tag}", "w").close()
    while gate and not os.path.exists(gate):
        n += 1
        print(f"waiting {tag} {n}")
        ctx.safe_point()
        time.sleep(0.02)
    if ctx.input.get("flood_bytes"):
        line = "x" * 99 + "\n"
        for i in range(int(ctx.input["flood_bytes"]) // 100):
            sys.stdout.write(line if i else "FIRST" + line[5:])
        print(f"last line of {tag}")
    if ctx.input.get("fail"):
        raise ValueError(f"broken on purpose {tag}")
    return {"said": tag}


register(workflow)
