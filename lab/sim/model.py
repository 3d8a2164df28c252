"""A simulated chat model: deterministic, free and local. Nothing here calls a paid or
remote model. It plans a tool call when the conversation has no tool result yet and
answers from the tool result otherwise."""

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from lab.sim import faults
from runs.agents import summary

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
    thread gets a fresh reading, not an old one from the history. Faults armed for
    ``model.complete`` (``lab.sim.faults``, e.g. a delay) fire first."""
    faults.fire("model.complete", "before", "")
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    tool_results = [m for m in messages[last_user + 1 :] if m["role"] == "tool"]
    question = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    if "lamp.set_brightness" in tools and tool_results:
        reading = json.loads(tool_results[-1]["content"])
        target = plan_brightness(question, int(reading["brightness"]))
        if target is not None:
            return ModelReply(
                tool_calls=[{"name": "lamp.set_brightness", "arguments": {"brightness": target}}]
            )
    if not tool_results and "thermostat.read" in tools:
        return ModelReply(
            tool_calls=[{"name": "thermostat.read", "arguments": {"room": "living room"}}]
        )
    if tool_results:
        reading = json.loads(tool_results[-1]["content"])
        if "celsius" in reading:
            return ModelReply(
                content=f"It is {reading['celsius']} °C in the {reading['room']} right now."
            )
        if "brightness" in reading and "previous" in reading:
            return ModelReply(
                content=f"Done: the lamp went from {reading['previous']}% "
                f"to {reading['brightness']}% brightness."
            )
    return ModelReply(content=f"I have no tool for that: {question}")


def stream(messages: list[dict[str, Any]]) -> Iterator[str]:
    """Answer ``messages`` as ``complete`` does (text only, no tools), yielding the reply
    word by word (each word with its trailing whitespace; the pieces join to the whole
    reply), pausing ``AGENTOPS_SIM_WORD_SECONDS`` between words like a real model."""
    pieces = re.findall(r"\S+\s*|\s+", complete(messages, []).content)
    for index, piece in enumerate(pieces):
        if index and settings.AGENTOPS_SIM_WORD_SECONDS:
            time.sleep(settings.AGENTOPS_SIM_WORD_SECONDS)
        yield piece


def plan_brightness(request: str, current: int) -> int | None:
    """The absolute brightness (percent, 0..100) a request asks for: "lower/dim by N%"
    and "raise/brighten by N%" move N percentage points from ``current``; "to N%" sets
    N. ``None`` when the request names no amount."""
    text = request.lower()
    found = re.search(r"\bto\s+(\d{1,3})\s*%", text)
    if found:
        target = int(found.group(1))
    else:
        found = re.search(r"\bby\s+(\d{1,3})\s*%", text)
        if not found:
            return None
        step = int(found.group(1))
        down = any(word in text for word in ("lower", "dim", "reduce", "decrease", "down"))
        target = current - step if down else current + step
    return max(0, min(100, target))


#: The simulated model's summary is the product's plain extractive one.
summarize = summary.summarize
