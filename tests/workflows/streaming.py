"""``streamed_reply``: one step that streams the model's reply into a draft message,
with a 2 s step timeout and a retry only 30 s later (so a test sees the first attempt
end). ``input["model"]`` names the model (default ``AGENTOPS_MODEL``). Registered by
tests through ``AGENTOPS_EXTRA_WORKFLOW_MODULES`` or by importing it."""

from agentops.authoring import RetryPolicy, Workflow, register

workflow = Workflow(
    "streamed_reply", version=1, input_fields={"question": str}, message_field="question"
)


@workflow.step(timeout=2, retry=RetryPolicy(max_attempts=2, initial_delay=30, max_delay=30))
def reply(ctx):
    message_id = ctx.begin_message()
    answer = ctx.stream_model(ctx.messages(), message_id=message_id, model=ctx.input.get("model"))
    ctx.finish_message(message_id, answer.content)
    return {"answer": answer.content}


register(workflow)
