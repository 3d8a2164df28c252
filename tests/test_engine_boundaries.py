"""The engine's boundaries, checked on the source with the standard library's ``ast``
(imports inside functions count too) and on the running models:

- nothing in ``runs/engine/`` imports the approvals app (the desk over the engine's
  approvals and takeovers), the lab (drills, simulator, demo seed), or a model
  provider's SDK;
- no module of the engine sits in an import cycle with a module outside it;
- the engine names no injected fault: the lab acts through the engine's hook points;
- only the gateway writes a status, attempt, version or generation of Run, Step,
  Approval, Takeover or Operation.
"""

import ast
from pathlib import Path

import pytest

from runs.engine.control.lifecycle import start_run
from runs.models import Approval, Operation, Run, Step, Takeover
from runs.state_fields import STATE_FIELDS, StateWriteRefused

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("runs", "approvals", "agentops", "lab")
ENGINE = "runs.engine"
FORBIDDEN_IN_ENGINE = (
    "approvals",
    "lab",
    "openai",
    "anthropic",
    "pydantic_ai",
)
#: The modules that may write state columns: the gateway, the lease SQL and the
#: one-statement claim and commit.
GATEWAY = {
    "runs.engine.state.gateway",
    "runs.engine.state.leases",
    "runs.engine.state.one_claim",
    "runs.engine.state.one_statement",
    "runs.state_fields",
}
RAW_STATE_UPDATES = (
    "UPDATE runs_run",
    "UPDATE runs_step",
    "UPDATE runs_operation",
    "UPDATE approvals_",
)
#: Guarded columns by model class name (``Step`` -> {"status", "attempt", ...}).
STATE_COLUMNS = {label.split(".")[1]: fields for label, fields in STATE_FIELDS.items()}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name the module imports, at any depth of its source."""
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


def _project_module(dotted: str) -> str | None:
    """The project module a dotted import name lands in (longest known prefix)."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        targets = {_project_module(d) for d in _imported_names(name, path)}
        graph[name] = {t for t in targets if t and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _in_engine(module: str) -> bool:
    return module == ENGINE or module.startswith(ENGINE + ".")


def test_it_keeps_the_engine_free_of_the_approvals_app_lab_and_sdks():
    offending = []
    for name, path in MODULES.items():
        if not _in_engine(name):
            continue
        for imported in _imported_names(name, path):
            if any(imported == f or imported.startswith(f + ".") for f in FORBIDDEN_IN_ENGINE):
                offending.append(f"{name} imports {imported}")
    assert offending == []


#: The run ``faults`` keys the lab's injection reads (``lab.injection``).
FAULT_NAMES = ("crash_before", "crash_at", "crash_after_tool", "hang_after_tool")


def test_it_keeps_fault_injection_out_of_the_engine():
    offending = []
    for name, path in MODULES.items():
        if not _in_engine(name):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                hit = [f for f in FAULT_NAMES if f in node.value]
                if hit:
                    offending.append(f"{name}:{node.lineno} names {', '.join(hit)}")
    assert offending == []


def test_it_finds_no_import_cycle_between_the_engine_and_the_rest():
    mixed = [
        sorted(component)
        for component in _cycles(_graph())
        if any(_in_engine(m) for m in component) and not all(_in_engine(m) for m in component)
    ]
    assert mixed == []


def test_its_cycle_finder_sees_a_loop_hidden_in_a_function():
    source = "def later():\n    from runs.engine.state import gateway\n"
    graph = {"approvals.services": set(), "runs.engine.state.gateway": {"approvals.services"}}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            graph["approvals.services"].add(f"{node.module}.{node.names[0].name}")
    assert _cycles(graph) == [{"approvals.services", "runs.engine.state.gateway"}]


def _receiver_model(call: ast.Call) -> str | None:
    """``X`` of ``X.objects....update(...)``: the model class name a chain rooted at a
    manager writes to (``None`` for anything else, e.g. a plain ``dict.update``)."""
    node = call.func.value
    while isinstance(node, (ast.Call, ast.Attribute)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("objects", "_base_manager")
            and isinstance(node.value, ast.Name)
        ):
            return node.value.id
        node = node.func if isinstance(node, ast.Call) else node.value
    return None


def test_it_finds_no_state_write_outside_the_gateway():
    offending = []
    for name, path in MODULES.items():
        if name in GATEWAY:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called == "write_state":
                offending.append(f"{name}:{node.lineno} calls write_state")
            if called in ("update", "bulk_update") and isinstance(func, ast.Attribute):
                written = {k.arg for k in node.keywords if k.arg}
                if called == "bulk_update" and len(node.args) > 1:
                    fields = node.args[1]
                    if isinstance(fields, (ast.List, ast.Tuple)):
                        written |= {e.value for e in fields.elts if isinstance(e, ast.Constant)}
                hit = written & STATE_COLUMNS.get(_receiver_model(node), set())
                if hit:
                    offending.append(f"{name}:{node.lineno} {called}({', '.join(sorted(hit))})")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if any(u in node.value for u in RAW_STATE_UPDATES):
                    offending.append(f"{name}:{node.lineno} raw UPDATE of a state table")
    assert offending == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("model", "column", "value"),
    [
        (Run, "status", "SUCCEEDED"),
        (Run, "version", 99),
        (Run, "generation", 7),
        (Run, "compensation_status", "DONE"),
        (Step, "status", "SUCCEEDED"),
        (Step, "attempt", 9),
        (Step, "generation", 7),
        (Operation, "status", "SUCCEEDED"),
        (Operation, "attempt", 9),
        (Approval, "status", "APPROVED"),
        (Takeover, "status", "RESOLVED"),
    ],
)
def test_it_refuses_a_state_write_through_a_queryset(model, column, value):
    start_run("room_temperature", thread_id="t-guard", input={"question": "warm?"})
    before = list(model.objects.order_by("pk").values_list(column, flat=True))
    with pytest.raises(StateWriteRefused) as refused:
        model.objects.all().update(**{column: value})
    assert refused.value.fields == [column]
    with pytest.raises(StateWriteRefused):
        model.objects.bulk_update(list(model.objects.all()), [column])
    assert list(model.objects.order_by("pk").values_list(column, flat=True)) == before


@pytest.mark.django_db
def test_it_still_lets_plain_columns_change():
    run = start_run("room_temperature", thread_id="t-plain", input={"question": "warm?"})
    assert Run.objects.filter(pk=run.pk).update(goal="cooler?") == 1
    assert Run.objects.get(pk=run.pk).goal == "cooler?"
