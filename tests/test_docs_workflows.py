"""Every workflow a page names in a command (``runs start NAME``, ``--workflow NAME``)
is registered: a reader copying the command gets a run, not ``unknown workflow``. This
covers the commands written inline in prose too, which the docs examples test does not
run."""

import re
from pathlib import Path

from runs.workflows import registry

REPO = Path(__file__).resolve().parent.parent
#: A workflow named in a command; capitalised words (``WORKFLOW``) are placeholders.
NAMED = re.compile(r"(?:runs start|--workflow)\s+([a-z][a-z0-9_]*)\b")


def test_every_workflow_a_page_names_in_a_command_is_registered():
    registered = set(registry.names())
    wrong = [
        f"{page.relative_to(REPO)}:{text.count(chr(10), 0, found.start()) + 1} {found[1]}"
        for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for text in [page.read_text(encoding="utf-8")]
        for found in NAMED.finditer(text)
        if found[1] not in registered
    ]
    assert wrong == []
