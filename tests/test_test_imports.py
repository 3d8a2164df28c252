"""The tests' own layering, checked on the source with ``ast`` (imports inside functions
count too): what test modules share lives in ``tests/support/`` (helpers, fixtures, fakes)
or ``tests/workflows/`` (workflows registered by name); no module under ``tests/``
imports a test module or a helper module beside the test modules, so a test module can
move, split or go without breaking another."""

from tests.support.services import REPO_ROOT
from tests.support.source_imports import imported_names

#: The packages of tests/ whose modules other modules may import.
SHARED = ("tests.support", "tests.workflows")


def _misplaced(imported: set[str]) -> set[str]:
    """The names of ``imported`` that reach into tests/ outside ``SHARED``."""
    return {
        name
        for name in imported
        if name.startswith("tests.")
        and not any(name == shared or name.startswith(shared + ".") for shared in SHARED)
    }


def test_it_has_no_test_module_import_another_module_of_tests(tmp_path):
    wrong = {}
    for path in sorted((REPO_ROOT / "tests").rglob("*.py")):
        name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
        if found := _misplaced(imported_names(name, path)):
            wrong[str(path.relative_to(REPO_ROOT))] = sorted(found)
    assert wrong == {}
    # Each import form is seen: a plain import, from-imports of a module and of a name,
    # a relative one and one inside a function; the shared packages pass.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import tests.test_a\nfrom tests import test_b\nfrom tests.test_c import x\n"
        "from ..test_d import y\ndef f():\n    from tests.helpers import z\n"
        "from tests.support.waiting import wait_until\nimport tests.workflows.chatty\n"
    )
    assert _misplaced(imported_names("tests.support.probe", probe)) == {
        "tests.test_a",
        "tests.test_b",
        "tests.test_c",
        "tests.test_c.x",
        "tests.test_d",
        "tests.test_d.y",
        "tests.helpers",
        "tests.helpers.z",
    }
