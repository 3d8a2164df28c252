"""Every workflow a page names in a command (``runs start NAME``, ``--workflow NAME``)
is registered: a reader copying the command gets a run, not ``unknown workflow``. This
covers the commands written inline in prose too, which the docs examples test does not
run. A workflow the page itself has the reader write (a ``<!-- docs-file: PATH -->``
block declaring ``Workflow("NAME", ...)``) counts as registered on that page."""

import re
from pathlib import Path

from runs.workflows import registry

REPO = Path(__file__).resolve().parent.parent
#: A workflow named in a command; capitalised words (``WORKFLOW``) are placeholders.
NAMED = re.compile(r"(?:runs start|--workflow)\s+([a-z][a-z0-9_]*)\b")
#: A file block the reader saves, and the workflows it declares.
DOCS_FILE = re.compile(r"<!--\s*docs-file:[^>]*-->\s*```\w*\n(.*?)^```", re.S | re.M)
DECLARED = re.compile(r"\bWorkflow\(\s*\"([a-z][a-z0-9_]*)\"")


def written_on(text: str) -> set[str]:
    """The workflows declared in the files ``text`` has the reader write."""
    return {name for block in DOCS_FILE.findall(text) for name in DECLARED.findall(block)}


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
