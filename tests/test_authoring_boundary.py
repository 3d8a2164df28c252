"""Workflow authors import one module, ``agentops.authoring``, checked on the source
with ``ast`` (imports inside functions count too):

- a workflow module (the bundled ones, the lab's, the test workflows under
  ``tests/workflows/``) and every Python example of README.md and docs/ imports, of
  the project, only ``agentops.authoring`` and its own package (an allowlist: the
  standard library, third-party packages and a reader's own modules are not the
  project's, so they pass; ``runs.models``, ``approvals`` or ``runs.engine.service``
  do not);
- a test module takes the authoring names (``Workflow``, ``Tool``, ``RetryPolicy``, ...)
  from ``agentops.authoring`` and registers through its ``register``: of the registry
  itself it uses only look-ups and clean-up (``REGISTRY_HOUSEKEEPING``);
- each stable name exists and says what it is, and the typed ``ctx`` protocols name
  only what the engine's contexts have.
"""

import ast
import inspect
import re
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import agentops.authoring as authoring
from runs.engine.effects.compensation import CompensationContext
from runs.engine.execution.step_context import StepContext

ROOT = Path(__file__).resolve().parent.parent
#: The project's top-level packages and modules: what a workflow may not reach into.
PROJECT = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} | {
    p.stem for p in ROOT.glob("*.py")
}
#: What every workflow module and example may import of the project.
AUTHORING = ("agentops.authoring",)
#: Modules of runs/workflows/ that are the authoring machinery, not workflows.
MACHINERY = {"__init__.py", "definition.py", "registry.py"}
#: Each kind of workflow module's own package, by the folder it lives in.
OWN = {
    "runs/workflows": tuple(
        f"runs.workflows.{p.stem}"
        for p in (ROOT / "runs" / "workflows").glob("*.py")
        if p.name not in MACHINERY
    ),
    # The lab's simulated outside world, its other workflows, and its fault switches
    # (a simulated device reads the fault its run carries).
    "lab/workflows": ("lab.sim", "lab.workflows", "lab.injection"),
    "tests/workflows": ("tests.workflows",),
}
#: What a test may use of ``runs.workflows.registry`` directly (authors have no use
#: for these; they are the test's look-ups and clean-up).
REGISTRY_HOUSEKEEPING = {"get", "names", "loaded_keys", "unregister"}
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def project_imports(tree: ast.AST) -> set[str]:
    """The names of the project ``tree`` imports at any depth, as imported: ``import a.b``
    gives ``a.b``, ``from a import b`` gives ``a.b`` (the module or the name in it); a
    relative import is the module's own package and is left out."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if n.split(".")[0] in PROJECT}


def forbidden(tree: ast.AST, own: tuple[str, ...] = ()) -> list[str]:
    """The project names ``tree`` imports besides ``AUTHORING`` and its ``own``
    packages, sorted."""
    allowed = AUTHORING + own
    return sorted(
        n
        for n in project_imports(tree)
        if not any(n == a or n.startswith(a + ".") for a in allowed)
    )


def own_packages(where: str) -> tuple[str, ...]:
    """The own packages of the source at ``where`` (a path, or ``page:line``)."""
    return next((own for folder, own in OWN.items() if where.startswith(folder + "/")), ())


def workflow_sources() -> dict[str, ast.AST]:
    """``{where: parsed source}`` of every workflow module and documented example."""
    found = {}
    for path in [
        *(ROOT / "runs" / "workflows").glob("*.py"),
        *(ROOT / "lab" / "workflows").glob("*.py"),
        *(ROOT / "tests/workflows").glob("*.py"),
    ]:
        if path.parent.name == "workflows" and path.name in MACHINERY:
            continue
        found[str(path.relative_to(ROOT))] = ast.parse(path.read_text(), str(path))
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for block in PYTHON_BLOCK.finditer(text):
            line = text.count("\n", 0, block.start()) + 1
            found[f"{page.relative_to(ROOT)}:{line}"] = ast.parse(block.group(1))
    return found


def test_it_keeps_workflows_and_examples_to_the_authoring_module():
    sources = workflow_sources()
    assert "lab/workflows/room_temperature.py" in sources
    assert "runs/workflows/order_followup.py" in sources
    assert "tests/workflows/faulty.py" in sources
    assert any(where.startswith("docs/first-workflow.md:") for where in sources)
    wrong = {
        where: names
        for where, tree in sources.items()
        if (names := forbidden(tree, own_packages(where)))
    }
    assert wrong == {}
    # The checker sees imports inside functions, the ``from package import module`` form,
    # and any module of the project, not only the engine's.
    probe = ast.parse(
        "import json, django.conf, pydantic_ai, shop.workflows\n"
        "from agentops.authoring import Workflow\n"
        "from agentops import authoring\n"
        "def f():\n    from runs.workflows import registry\n    import runs.tools\n"
        "from runs.models import Run\nfrom runs import states\nimport approvals.services\n"
        "from runs.engine import service\nfrom lab.sim import devices\n"
        "from agentops import settings\nfrom . import sibling\n"
    )
    assert forbidden(probe) == [
        "agentops.settings",
        "approvals.services",
        "lab.sim.devices",
        "runs.engine.service",
        "runs.models.Run",
        "runs.states",
        "runs.tools",
        "runs.workflows.registry",
    ]
    assert "lab.sim.devices" not in forbidden(probe, own_packages("lab/workflows/x.py"))
    assert forbidden(probe, own_packages("tests/workflows/x.py"))[0] == "agentops.settings"
    assert own_packages("docs/first-workflow.md:40") == ()


def is_authoring_name(module: str | None, name: str) -> bool:
    """Whether ``from module import name`` is the object ``agentops.authoring`` exports
    under that name (the engine's own context classes share the protocols' names)."""
    try:
        return getattr(import_module(module or ""), name, None) is getattr(authoring, name)
    except ImportError:
        return False


def test_it_has_tests_take_the_authoring_names_from_the_authoring_module():
    stable = set(authoring.__all__)
    wrong = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and node.module != "agentops.authoring":
                wrong += [
                    f"{where} {a.name}"
                    for a in node.names
                    if a.name in stable and is_authoring_name(node.module, a.name)
                ]
            # A test reaches into the workflow registry only to look a definition up or
            # clean up after itself; registering is an author's move: register().
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "registry"
                and node.attr not in REGISTRY_HOUSEKEEPING
            ):
                wrong.append(f"{where} registry.{node.attr}")
    assert wrong == []


def test_it_documents_every_stable_name_and_the_ctx_protocols_match_the_engine():
    undocumented = [
        name
        for name in authoring.__all__
        if (inspect.isclass(value := getattr(authoring, name)) or callable(value))
        and not inspect.getdoc(value)
    ]
    assert undocumented == []
    assert authoring.__doc__ and "docs/first-workflow.md" in authoring.__doc__
    assert authoring.__doc__ and "docs/first-workflow.md" in authoring.__doc__
    for protocol, engine in (
        (authoring.StepContext, StepContext),
        (authoring.CompensationContext, CompensationContext),
    ):
        methods = [n for n, v in vars(protocol).items() if inspect.isfunction(v) and n[0] != "_"]
        assert methods and [m for m in methods if not callable(getattr(engine, m, None))] == []
        assert all(inspect.getdoc(getattr(protocol, m)) for m in methods)
        # Attributes are set per instance by the engine's __init__.
        init = inspect.getsource(engine.__init__)
        fields = protocol.__annotations__
        assert [f for f in fields if f"self.{f} " not in init and f"self.{f}:" not in init] == []


def test_it_loads_agents_only_when_an_agent_name_is_asked_for():
    code = (
        "import sys, django; django.setup()\n"
        "import agentops.authoring as a\n"
        "assert 'pydantic_ai' not in sys.modules, 'imported early'\n"
        "a.register_agent\n"
        "assert 'pydantic_ai' in sys.modules\n"
        "try:\n    a.no_such_name\nexcept AttributeError as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": "agentops.settings", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "has no attribute 'no_such_name'" in done.stdout
