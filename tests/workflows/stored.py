"""``stored_artifact`` and ``stored_approval``: one-step workflows whose step hands the
engine a value no database stores faithfully (``BAD[input["bad"]]``) in a place other
than its output: an artifact's metadata or name, an approval request's evidence, or
text holding NUL in an approval's question. Registered on import."""

from datetime import UTC, datetime

from agentops.authoring import Workflow, register

#: name -> (value, path inside it, type name in the error).
BAD = {
    "nan": ({"score": float("nan")}, "$.score", "float"),
    "inf": ({"score": [1, float("inf")]}, "$.score[1]", "float"),
    "datetime": ({"at": datetime(2026, 1, 1, tzinfo=UTC)}, "$.at", "datetime"),
    "int_key": ({"by_id": {1: "a"}}, "$.by_id[1]", "int"),
    "bytes": ({"raw": b"\x01"}, "$.raw", "bytes"),
    "set": ({"tags": {"a"}}, "$.tags", "set"),
}

artifact_workflow = Workflow("stored_artifact", version=1, input_fields={"bad": str})


@artifact_workflow.step()
def make(ctx):
    if ctx.input["bad"] == "nul_name":
        ctx.save_artifact("report\x00.txt", "hello")
    else:
        ctx.save_artifact("report.txt", "hello", metadata=BAD[ctx.input["bad"]][0])
    return {"saved": True}


approval_workflow = Workflow("stored_approval", version=1, input_fields={"bad": str})


@approval_workflow.approval()
def ask(ctx):
    bad = ctx.input["bad"]
    if bad == "nul_text":
        return {"question": "ship\x00it?", "reason": "why\x00not", "evidence": {"k\x00": "v\x00"}}
    return {"question": "ship it?", "reason": "", "evidence": BAD[bad][0]}


@approval_workflow.step()
def shipped(ctx):
    return {"shipped": True}


register(artifact_workflow)
register(approval_workflow)
