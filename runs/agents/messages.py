"""Reading a Pydantic AI conversation: what the user asked and what the tools answered."""

from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart


def prompt_and_results(messages: list[ModelMessage]) -> tuple[str, list[tuple[str, Any]]]:
    """``(last user prompt, [(tool name, result)])`` with the results after that prompt,
    oldest first."""
    prompt = ""
    results: list[tuple[str, Any]] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                prompt, results = part.content, []
            elif isinstance(part, ToolReturnPart):
                results.append((part.tool_name, part.content))
    return prompt, results
