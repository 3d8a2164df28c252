"""Every workflow a page names in a command (``runs start NAME``, ``--workflow NAME``)
is registered: a reader copying the command gets a run, not ``unknown workflow``. This
covers the commands written inline in prose too, which the docs examples test does not
run. A workflow the page itself has the reader write (a ``<!-- docs-file: PATH -->``
block declaring ``Workflow("NAME", ...)`` or ``register_agent(..., name="NAME")``) counts
as registered on that page."""

import re
from pathlib import Path

from runs.workflows import registry

REPO = Path(__file__).resolve().parent.parent
#: A workflow named in a command; capitalised words (``WORKFLOW``) are placeholders.
NAMED = re.compile(r"(?:runs start|--workflow)\s+([a-z][a-z0-9_]*)\b")
#: A file block the reader saves, and the workflows it declares.
DOCS_FILE = re.compile(r"<!--\s*docs-file:[^>]*-->\s*```\w*\n(.*?)^```", re.S | re.M)
DECLARED = re.compile(r"\bWorkflow\(\s*\"([a-z][a-z0-9_]*)\"")
#: ``register_agent(...)``'s own ``name=`` argument (nested calls are skipped over).
AGENT_CALL = re.compile(r"\bregister_agent\(")
AGENT_NAME = re.compile(r"(?<![\w.])name=\"([a-z][a-z0-9_]*)\"")


def _top_level_arguments(block: str, start: int) -> str:
    """The text of the call opened just before ``start``, without nested calls."""
    depth, kept = 1, []
    for char in block[start:]:
        depth += (char == "(") - (char == ")")
        if depth == 0:
            break
        if depth == 1 and char != ")":
            kept.append(char)
    return "".join(kept)


def written_on(text: str) -> set[str]:
    """The workflows declared in the files ``text`` has the reader write."""
    names = set()
    for block in DOCS_FILE.findall(text):
        names.update(DECLARED.findall(block))
        for call in AGENT_CALL.finditer(block):
            names.update(AGENT_NAME.findall(_top_level_arguments(block, call.end())))
    return names


def test_every_workflow_a_page_names_in_a_command_is_registered():
    registered = set(registry.names())
    wrong = [
        f"{page.relative_to(REPO)}:{text.count(chr(10), 0, found.start()) + 1} {found[1]}"
        for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for text in [page.read_text(encoding="utf-8")]
        for found in NAMED.finditer(text)
        if found[1] not in registered | written_on(text)
    ]
    assert wrong == []
    assert "refund_order" in written_on((REPO / "docs/first-workflow.md").read_text())
    assert {"retry_agent", "fallback_agent", "parallel_agent"} <= written_on(
        (REPO / "docs/agents.md").read_text()
    )
