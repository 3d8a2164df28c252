"""Workflows for tests/test_child_runs.py (through ``AGENTOPS_EXTRA_WORKFLOW_MODULES``):
``one_kid`` waits for one child on its own thread (the child fails when its input says
so), ``attaching`` and ``detaching`` start a child that waits for the signal ``go``,
attached and detached."""

from agentops.authoring import StepError, Workflow, register

kid = Workflow("kid", version=1, input_fields={"n": int}, input_ranges={"n": (0, 100)})


@kid.step()
def work(ctx):
    if ctx.input.get("fail"):
        raise StepError(ctx.input["fail"], f"kid {ctx.input['n']} was asked to fail")
    return {"doubled": 2 * ctx.input["n"]}


waiting_kid = Workflow("waiting_kid", version=1)


@waiting_kid.signal("go")
def wait_for_go(ctx):
    return None


@waiting_kid.step()
def went(ctx):
    return {"went": True}


one_kid = Workflow("one_kid", version=1, input_fields={"n": int})


@one_kid.child("kid", thread="parent")
def ask(ctx):
    return {key: value for key, value in ctx.input.items() if key in ("n", "fail")}


@one_kid.step()
def report(ctx):
    return {"got": ctx.outputs["ask"]}


attaching = Workflow("attaching", version=1)


@attaching.child("waiting_kid")
def start_kid(ctx):
    return {}


@attaching.step()
def after_kid(ctx):
    return {"kid": ctx.outputs["start_kid"]}


detaching = Workflow("detaching", version=1)


@detaching.child("waiting_kid", detached=True)
def spawn(ctx):
    return {}


@detaching.step()
def done(ctx):
    return {"children": ctx.outputs["spawn"]["children"]}


for _workflow in (kid, waiting_kid, one_kid, attaching, detaching):
    register(_workflow)
