"""A three-step workflow whose versions tests register one module at a time, playing old
and new code side by side (``AGENTOPS_EXTRA_WORKFLOW_MODULES``)."""

from agentops.authoring import Workflow


def build(version: int, migrate_from=None) -> Workflow:
    """``versioned@version``: ``first`` -> ``second`` -> ``third``; each output names the
    version that ran it, and ``third`` reports what ``first`` left in the checkpoint."""
    wf = Workflow(
        "versioned", version=version, migrate_from=migrate_from, input_fields={"label": str}
    )

    @wf.step()
    def first(ctx):
        return {"version": version, "label": ctx.input["label"]}

    @wf.step()
    def second(ctx):
        return {"version": version}

    @wf.step()
    def third(ctx):
        return {"version": version, "first": ctx.outputs["first"]}

    return wf
