"""The thread's earlier messages as an agent run's ``message_history``.

Built by the engine's context assembly (``runs.engine.data.model_input``) from stored
records only: the thread's summary of older messages, then the messages after it up to
the run's start, so a step re-executed after a crash hands the agent the same history.
When the uncovered history has grown past ``AGENTOPS_CONTEXT_SUMMARY_TOKENS``, the step
first summarises it with the plain extractive summary (``runs.agents.summary``, no
model request) and stages the summary, committed with the step.

The run's own prompt (the last message of that history) is left out: the agent gets it
as its user prompt. A tool result whose call is not in the history (its call was
summarised) and a call without its result (an earlier run stopped before it) are left
out too: every provider refuses a conversation in which they do not pair up.
"""

from typing import Any

from runs.agents.summary import summarize
from runs.engine.data.model_input import assemble_context, summary_due


def thread_history(ctx) -> list:
    """The thread of the run ``ctx`` (a ``StepContext``) executes, before its prompt, as
    Pydantic AI messages (oldest first; empty for a run that starts a thread). Stages a
    summary when one is due."""
    from pydantic_ai.messages import ModelRequest, SystemPromptPart

    context = assemble_context(ctx.run)
    part = context.part("messages")
    rows = list(part["messages"]) if part else []
    summary = context.part("summary")
    covers, text = (summary["covers"], summary["content"]) if summary else (None, "")
    plan = summary_due(ctx.run)
    if plan is not None:
        previous = plan.previous.content if plan.previous else ""
        text = summarize(previous, plan.new_messages)
        ctx.add_summary(plan, text)
        covers = [1, plan.last_seq]
        rows = [r for r in rows if r["seq"] > plan.last_seq]
    if rows and rows[-1]["role"] == "user" and rows[-1]["seq"] == context.history_end:
        rows = rows[:-1]  # the run's own prompt
    out: list = []
    if covers is not None:
        heading = f"Summary of the conversation so far (messages {covers[0]}..{covers[1]}):\n"
        out.append(ModelRequest(parts=[SystemPromptPart(heading + text)]))
    out.extend(_messages(rows))
    return out


def _messages(rows: list[dict[str, Any]]) -> list:
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    answered = {r["tool_call_id"] for r in rows if r["role"] == "tool" and r.get("tool_call_id")}
    names: dict[str, str] = {}
    out: list = []
    for row in rows:
        role, content = row["role"], row.get("content") or ""
        if role == "user" and content:
            out.append(ModelRequest(parts=[UserPromptPart(content)]))
        elif role == "assistant":
            parts: list = [TextPart(content)] if content else []
            for call in row.get("tool_calls") or []:
                if call.get("id") in answered:
                    names[call["id"]] = call.get("name", "")
                    parts.append(
                        ToolCallPart(call.get("name", ""), call.get("arguments"), call["id"])
                    )
            if parts:
                out.append(ModelResponse(parts=parts))
        elif role == "tool" and row.get("tool_call_id") in names:
            call_id = row["tool_call_id"]
            out.append(ModelRequest(parts=[ToolReturnPart(names.pop(call_id), content, call_id)]))
    return out
