"""A workflow for tests/test_input_rules.py: ``signalled`` waits for the signal
``reading`` whose schema is not a flat object of simple types (``tags`` is an array), so
the console's form takes its payload as one JSON field, as the CLI and the API do."""

from agentops.authoring import Workflow, register

READING_SCHEMA = {
    "type": "object",
    "properties": {"celsius": {"type": "number"}, "tags": {"type": "array"}},
    "required": ["celsius"],
}

workflow = Workflow("signalled", version=1)


@workflow.signal("reading", schema=READING_SCHEMA)
def await_reading(ctx):
    return None


@workflow.step(final=True)
def done(ctx):
    return {"celsius": ctx.outputs["await_reading"]["payload"]["celsius"]}


register(workflow)
