"""What the project's modules import, read from their source with the standard
library's ``ast`` (imports inside functions count too): the raw material of the
boundary tests."""

import ast
from pathlib import Path

from tests.support.services import REPO_ROOT

#: The product's packages (the code the boundary tests hold to their rules).
PRODUCT_PACKAGES = ("runs", "approvals", "agentops", "lab")


def project_modules(packages: tuple[str, ...] = PRODUCT_PACKAGES) -> dict[str, Path]:
    """``{dotted module name: source path}`` of every module of ``packages`` (folders at
    the repository's root), migrations left out; a package is named without
    ``.__init__``."""
    found = {}
    for package in packages:
        for path in (REPO_ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name the module ``name`` (source at ``path``) imports, at any depth
    of its source: ``from a import b`` gives ``a`` and ``a.b``, relative imports are
    resolved against ``name``. Raises ``SyntaxError`` for a source that does not parse."""
    names = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names
