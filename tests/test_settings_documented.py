"""Every setting read from the environment is in README's configuration table."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _settings_read() -> set[str]:
    """Names passed to the ``env_*`` readers in settings.py, and AGENTOPS_/OPENAI_
    names read straight from ``os.environ`` anywhere in the apps."""
    names = set()
    for node in ast.walk(ast.parse((REPO / "agentops/settings.py").read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id.startswith("env_")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(node.args[0].value)
    for app in ("agentops", "runs", "approvals", "apitokens"):
        for path in (REPO / app).rglob("*.py"):
            names |= set(
                re.findall(
                    r'environ(?:\.get)?\(\s*"((?:AGENTOPS|OPENAI)_[A-Z_]+)"', path.read_text()
                )
            )
    return names


def test_readme_documents_every_setting():
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("## Configuration") :]
    table = table[: table.index("\n## ", 1)]
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", table))
    missing = sorted(_settings_read() - documented)
    assert not missing, f"add these to README's configuration table: {missing}"
