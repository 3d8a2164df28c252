"""The product's summary of a thread's older messages: plain, extractive and
deterministic (no model request), so a step re-executed after a crash writes the same
text."""

from typing import Any

#: Lines a summary keeps (the newest ones).
SUMMARY_LINES = 40


def summarize(previous: str, messages: list[dict[str, Any]]) -> str:
    """The lines of ``previous`` (the summary it extends, ``""`` for none) plus one line
    per message of ``messages`` (``[{"seq", "role", "content", "tool_calls"}]``): its
    first sentence (at most 120 characters) and the tools it called, as ``#<seq> <role>:
    <text>``. Keeps the newest ``SUMMARY_LINES`` lines, headed by how many were
    omitted."""
    lines = [line for line in previous.splitlines() if line and not line.startswith("(")]
    for m in messages:
        first = (m.get("content") or "").strip().split(". ")[0][:120]
        calls = ", ".join(c["name"] for c in m.get("tool_calls") or [])
        if calls:
            first = f"{first} (called {calls})".strip()
        if first:
            lines.append(f"#{m['seq']} {m['role']}: {first}")
    dropped = max(0, len(lines) - SUMMARY_LINES)
    kept = lines[dropped:]
    head = [f"({dropped} earlier lines omitted)"] if dropped else []
    return "\n".join(head + kept)
