"""Every source file (``runs/engine/effects/ledger.py``) and dotted module or name
(``runs.engine.control.cancel.request_cancel``) that README.md and docs/*.md name
exists, so the pages keep pointing at real code when it moves."""

import importlib
import itertools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
PACKAGES = "runs|approvals|apitokens|agentops"
#: ``runs/engine/effects/ledger.py``, also with a brace list: ``runs/x/{a,b}.py``.
PATH = re.compile(rf"\b(?:{PACKAGES})/[\w/{{}},.-]*?\.py\b")
#: ``runs.engine.control.cancel.request_cancel`` (two dots at least, so not a file name;
#: ``agentops.`` starts host names in the deploy examples too, so only the apps count).
DOTTED = re.compile(r"\b(?:runs|approvals|apitokens)(?:\.[A-Za-z_]\w*){2,}")


def expand(path: str) -> list[str]:
    """``runs/x/{a,b}.py`` -> ``["runs/x/a.py", "runs/x/b.py"]``."""
    parts = re.split(r"\{([^}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def resolves(dotted: str) -> bool:
    """True if the longest importable prefix of ``dotted`` is a module and the rest are
    attributes of it (``runs.engine.effects.budget.raise_budget``)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(value, name):
                return False
            value = getattr(value, name)
        return True
    return False


def named(page: str) -> tuple[set[str], set[str]]:
    text = (REPO / page).read_text(encoding="utf-8")
    paths = {p for found in PATH.findall(text) for p in expand(found)}
    return paths, set(DOTTED.findall(text))


def test_it_finds_names_in_the_forms_the_pages_use():
    assert expand("runs/engine/{dispatch,worker}.py") == [
        "runs/engine/dispatch.py",
        "runs/engine/worker.py",
    ]
    assert resolves("runs.engine.control.cancel.request_cancel")
    assert not resolves("runs.engine.effects.model_provider")
    assert not resolves("runs.engine.control.cancel.no_such_function")


@pytest.mark.parametrize("page", PAGES)
def test_every_path_and_module_the_page_names_exists(page):
    paths, dotted = named(page)
    missing = sorted(p for p in paths if not (REPO / p).is_file())
    missing += sorted(d for d in dotted if not resolves(d))
    assert not missing, f"{page} names what does not exist: {missing}"
