"""A simulated chat model: deterministic, free and local. Nothing here calls a paid or
remote model. It plans a tool call when the conversation has no tool result yet and
answers from the tool result otherwise."""

import json
from dataclasses import dataclass, field
from typing import Any

#: Price of one simulated call in USD, charged to the run's budget like a real one.
COST_PER_CALL_USD = "0.001"


@dataclass
class ModelReply:
    """``content`` text and ``tool_calls`` as ``[{"name", "arguments"}]`` (ids are added
    by the engine so they stay stable across attempts)."""

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def complete(messages: list[dict[str, Any]], tools: list[str]) -> ModelReply:
    """Answer ``messages`` (``[{"role", "content", "tool_calls", "tool_call_id"}]``).

    Only tool results after the last user message count: a new question on a long
    thread gets a fresh reading, not an old one from the history."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    tool_results = [m for m in messages[last_user + 1:] if m["role"] == "tool"]
    if not tool_results and "thermostat.read" in tools:
        return ModelReply(tool_calls=[{"name": "thermostat.read",
                                       "arguments": {"room": "living room"}}])
    if tool_results:
        reading = json.loads(tool_results[-1]["content"])
        if "celsius" in reading:
            return ModelReply(
                content=f"It is {reading['celsius']} °C in the {reading['room']} right now."
            )
    question = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    return ModelReply(content=f"I have no tool for that: {question}")


#: Lines an extractive summary keeps (the newest ones).
SUMMARY_LINES = 40


def summarize(previous: str, messages: list[dict[str, Any]]) -> str:
    """A plain extractive summary: the lines of ``previous`` plus the first sentence of
    each of ``messages`` (``[{"seq", "role", "content"}]``), keeping the newest
    ``SUMMARY_LINES`` lines. Deterministic, so a re-run after a crash writes the same."""
    lines = [line for line in previous.splitlines() if line and not line.startswith("(")]
    for m in messages:
        first = (m.get("content") or "").strip().split(". ")[0][:120]
        if first:
            lines.append(f"#{m['seq']} {m['role']}: {first}")
    dropped = max(0, len(lines) - SUMMARY_LINES)
    kept = lines[dropped:]
    head = [f"({dropped} earlier lines omitted)"] if dropped else []
    return "\n".join(head + kept)
