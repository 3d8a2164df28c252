"""The engine's boundaries, checked on the source with the standard library's ``ast``
(imports inside functions count too) and on the running models:

- outside code reaches the engine through one module, ``runs.engine.service``; the
  exceptions are listed below, each with its reason;
- nothing in ``runs/engine/`` imports the approvals app (the desk over the engine's
  approvals and takeovers), the lab (drills, simulator, demo seed), or a model
  provider's SDK;
- no module of the engine sits in an import cycle with a module outside it, and the
  engine's own modules import each other without any cycle;
- the engine names no injected fault: the lab acts through the engine's hook points;
- no module of the product (runs, approvals, apitokens, agentops_client, agentops)
  imports the lab, and the product starts, checks and runs a workflow without it;
- only the gateway writes a status, attempt, version or generation of Run, Step,
  Approval, Takeover or Operation, and only the store's ORM backend decides an approval
  or resolves a takeover through it.
"""

import ast
import io
from pathlib import Path

import pytest
from django.core.management import call_command

from runs.engine import hooks
from runs.engine.control import lifecycle
from runs.engine.execution import sweeper
from runs.engine.service import run_status, start_run
from runs.engine.state import gateway
from runs.models import Approval, Operation, Run, Step, Takeover
from runs.state_fields import STATE_FIELDS, StateWriteRefused
from tests.support.source_imports import imported_names, project_modules

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


#: The engine's one door for outside code.
ENTRY = "runs.engine.service"
#: Outside modules that may import engine modules other than the entry, by name or
#: package prefix, and why:
#: - ``runs.agents`` is inside the boundary: it is the engine's execution of Pydantic AI
#:   agents, code that runs within a step's attempt under its lease (each model request
#:   and tool call recorded in the ledger, drafts streamed, budget and step errors raised
#:   to the executor), not a face that asks the engine for something;
#: - ``agentops.authoring`` is the workflow authors' door: it re-exports the definition,
#:   tool, retry and error names from where the engine keeps them;
#: - ``runs.apps`` and ``lab.apps`` wire the engine at start-up: they register each hook
#:   by name;
#: - the lab (drills, soak, bench, simulator, demo seed) drives the engine's insides on
#:   purpose.
BEYOND_THE_ENTRY = (
    "runs.agents",
    "agentops.authoring",
    "runs.apps",
    "lab",
)
#: Engine modules of plain values and checks (names, durations, JSON values, input
#: rules, retry policies, step errors) that import nothing else of the project. The modules below
#: the engine (those it imports itself: models, fields, tools, workflow definitions) and
#: the settings (read before any app is loaded) use these: the entry would be a cycle.
VALUE_MODULES = {
    "runs.engine.names",
    "runs.engine.durations",
    "runs.engine.state.values",
    "runs.engine.effects.retry",
    "runs.engine.errors",
    "runs.engine.rules",
}
#: The settings and what they load before any app is (the log formatter of LOGGING).
SETTINGS = {"agentops.settings", "agentops.env", "agentops.log_format"}


MODULES = project_modules()
PACKAGES_OF_ENGINE = {
    name for name, path in MODULES.items() if name.startswith(ENGINE) and path.name == "__init__.py"
}


def _project_module(dotted: str) -> str | None:
    """The project module a dotted import name lands in (longest known prefix)."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        targets = {_project_module(d) for d in imported_names(name, path)}
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


def _within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _entry_breaches(name: str, imported: set[str], below: set[str]) -> list[str]:
    """The engine modules ``name`` (outside the engine) imports that it may not: anything
    but the entry, or for a module below the engine anything but a value module. The
    engine's package modules (docstrings only) are passed through, as in ``from runs.engine import
    service``: what is taken from them is checked by its own name."""
    allowed = VALUE_MODULES if name in below else {ENTRY}
    return sorted(
        f"{name} imports {target}"
        for target in imported
        if _in_engine(target) and target not in allowed and target not in PACKAGES_OF_ENGINE
    )


def _below_the_engine(graph: dict[str, set[str]]) -> set[str]:
    """Outside modules the engine imports, directly or through each other, and the
    settings."""
    below, todo = set(SETTINGS), [m for m in graph if _in_engine(m)]
    while todo:
        for target in graph[todo.pop()]:
            if not _in_engine(target) and target not in below:
                below.add(target)
                todo.append(target)
    return below


def test_it_lets_outside_code_import_only_the_entry_module():
    graph = _graph()
    below = _below_the_engine(graph)
    offending = []
    for name, path in MODULES.items():
        if _in_engine(name) or _within(name, BEYOND_THE_ENTRY):
            continue
        landed = {_project_module(d) for d in imported_names(name, path)}
        offending += _entry_breaches(name, {t for t in landed if t}, below)
    assert offending == []
    # The value modules stay leaves, so the modules below the engine that use them
    # import nothing that imports them back.
    assert {m: graph[m] - VALUE_MODULES for m in VALUE_MODULES} == {m: set() for m in VALUE_MODULES}


def test_its_entry_check_sees_an_import_inside_a_function():
    source = "def later():\n    from runs.engine.control.lifecycle import start_run\n"
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert _entry_breaches("runs.cli.start", imported, set()) == [
        "runs.cli.start imports runs.engine.control.lifecycle"
    ]
    assert _entry_breaches("runs.models", imported, {"runs.models"}) == [
        "runs.models imports runs.engine.control.lifecycle"
    ]
    assert _entry_breaches("runs.cli.start", {ENTRY}, set()) == []


def test_it_keeps_the_engine_free_of_the_approvals_app_lab_and_sdks():
    offending = []
    for name, path in MODULES.items():
        if not _in_engine(name):
            continue
        for imported in imported_names(name, path):
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


def _engine_graph() -> dict[str, set[str]]:
    return {
        name: {t for t in targets if _in_engine(t)}
        for name, targets in _graph().items()
        if _in_engine(name)
    }


def test_it_finds_no_import_cycle_inside_the_engine():
    # Imports inside functions count: hiding one in a function defers the import, it
    # does not take the dependency away.
    graph = _engine_graph()
    assert _cycles(graph) == []
    # The store's backends take the interface from a module that imports neither of them,
    # and one factory module picks the backend.
    factory, interface = "runs.engine.state.store", "runs.engine.state.store_interface"
    backends = {"runs.engine.state.store_orm", "runs.engine.state.store_postgres"}
    assert graph[interface] & (backends | {factory}) == set()
    assert backends <= graph[factory]
    assert all(factory not in graph[b] for b in backends)


def test_its_engine_cycle_check_sees_a_loop_inside_the_engine_hidden_in_a_function():
    graph = _engine_graph()
    source = "def pick():\n    from runs.engine.state import store\n"
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            imported |= {f"{node.module}.{alias.name}" for alias in node.names}
    graph["runs.engine.state.store_orm"] = graph["runs.engine.state.store_orm"] | {
        _project_module(d) or "" for d in imported
    }
    assert _cycles(graph) == [
        {
            "runs.engine.state.store",
            "runs.engine.state.store_orm",
            "runs.engine.state.store_postgres",
        }
    ]


def test_its_cycle_finder_sees_a_loop_hidden_in_a_function():
    source = "def later():\n    from runs.engine.state import gateway\n"
    graph = {"approvals.services": set(), "runs.engine.state.gateway": {"approvals.services"}}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            graph["approvals.services"].add(f"{node.module}.{node.names[0].name}")
    assert _cycles(graph) == [{"approvals.services", "runs.engine.state.gateway"}]


#: The gateway's moves that only the store's ORM backend calls: callers decide an
#: approval and resolve a takeover through ``Store.decide`` and ``Store.resolve``.
STORE_ONLY_MOVES = {"decide_approval", "resolve_takeover"}
STORE_BACKEND = "runs.engine.state.store_orm"


def test_it_lets_only_the_store_decide_approvals_and_resolve_takeovers():
    offending = []
    for name, path in MODULES.items():
        if name in (STORE_BACKEND, "runs.engine.state.gateway"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            # A RunTx move is called on the run's transaction, ``tx`` (``services.
            # resolve_takeover`` of the approvals app is a function of the same name).
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in STORE_ONLY_MOVES
                and not (isinstance(node.func.value, ast.Name) and node.func.value.id != "tx")
            ):
                offending.append(f"{name}:{node.lineno} calls {node.func.attr}")
    assert offending == []


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


def test_it_registers_each_hook_by_name_once():
    assert list(gateway.RUN_LOCKED_HOOKS) == ["preconditions"]
    assert list(gateway.RUN_FINISHED_HOOKS) == [
        "queued_messages",
        "child_runs",
        "concurrency_places",
    ]
    assert list(sweeper.EXTRA_TASKS) == [
        "compensations",
        "queued_messages",
        "cancels_finished",
        "approvals_expired",
        "stuck_flagged",
        "dead_owners",
        "pauses_settled",
        "signal_waits_timed_out",
        "schedule_runs_started",
        "child_runs_settled",
    ]
    assert list(sweeper.NEXT_DUE) == ["signal_deadline", "schedule_tick"]
    assert list(lifecycle.STATUS_EXTRAS) == ["calls", "devices"]
    with pytest.raises(ValueError, match="run-locked hook 'preconditions' is already"):
        gateway.register_run_locked_hook("preconditions", lambda tx: None)
    with pytest.raises(ValueError, match="run-finished hook 'child_runs' is already"):
        gateway.register_run_finished_hook("child_runs", lambda *args: None)
    with pytest.raises(ValueError, match="sweep task 'compensations' is already"):
        sweeper.register_task("compensations", lambda actor, batch: 0)
    with pytest.raises(ValueError, match="next-due hook 'schedule_tick' is already"):
        sweeper.register_next_due("schedule_tick", lambda: None)
    with pytest.raises(ValueError, match="status extra 'calls' is already"):
        lifecycle.register_status_extra("calls", lambda run: None)
    assert list(gateway.RUN_LOCKED_HOOKS) == ["preconditions"]
    assert len(sweeper.EXTRA_TASKS) == 10


#: The product: what a deployment runs without the lab app.
PRODUCT = ("runs", "approvals", "apitokens", "agentops_client", "agentops")


def test_it_keeps_the_product_free_of_the_lab():
    offending = [
        f"{name} imports {imported}"
        for name, path in project_modules(PRODUCT).items()
        for imported in imported_names(name, path)
        if imported == "lab" or imported.startswith("lab.")
    ]
    assert offending == []


#: The lab's commands, by the files that define them.
LAB_COMMANDS = sorted(
    p.stem
    for p in (Path(__file__).parent.parent / "lab" / "management" / "commands").glob("*.py")
    if not p.name.startswith("_")
)


def test_the_product_starts_and_runs_a_workflow_with_the_lab_off(deployment_factory):
    d = deployment_factory("sqlite", extra_env={"AGENTOPS_LAB": "0"})
    check = d.manage("check")
    assert check.returncode == 0, check.stderr
    apps = d.manage(
        "shell", "-c", "from django.conf import settings; print(settings.INSTALLED_APPS)"
    )
    assert "'runs'" in apps.stdout and "'lab'" not in apps.stdout, apps.stderr
    # No lab command is offered, and runs start offers no fault flag.
    listed = d.manage("help", check=True).stdout.split()
    assert LAB_COMMANDS and "[lab]" not in listed
    assert [c for c in LAB_COMMANDS if c in listed] == []
    usage = d.manage("runs", "start", "--help", check=True).stdout
    flags = [f"--{flag.name.replace('_', '-')}" for flag in hooks.fault_flags()]
    assert "--crash-before" in flags and [f for f in flags if f in usage] == []
    refused = d.manage("runs", "start", "room_temperature", "--thread", "T0")
    assert refused.returncode == 1 and "[unknown_workflow]" in refused.stderr
    run_id = d.manage(
        "runs",
        "start",
        "fanout_demo",
        "--thread",
        "T1",
        "--input",
        '{"items": 2, "delay_s": 0}',
        check=True,
    ).stdout.strip()
    # An agent without a model of its own, with no AGENTOPS_MODEL and no lab: its step
    # stops for a person with a code that names what to set, never a run on nothing.
    agent_id = d.manage(
        "runs",
        "start",
        "capital_agent",
        "--thread",
        "T2",
        "--input",
        '{"prompt": "What is my capital?", "deps": {"country": "Mexico"}}',
        check=True,
    ).stdout.strip()
    d.manage("worker", "--burst", check=True, timeout=180)
    status = d.manage_json("runs", "status", run_id, "--json")
    assert status["status"] == "SUCCEEDED"
    assert "calls" not in status and "devices" not in status
    shown = d.manage("runs", "status", run_id, check=True).stdout
    assert "SUCCEEDED" in shown and "device" not in shown
    agent = d.manage_json("runs", "status", agent_id, "--json")
    assert agent["status"] == "PAUSED"
    assert [s["error_code"] for s in agent["steps"]] == ["MODEL_NOT_CONFIGURED"]
    assert "MODEL_NOT_CONFIGURED" in agent["takeover"]["reason"]
    assert "AGENTOPS_MODEL" in agent["takeover"]["suggested_action"]
    # The lab's default model is gone with it: naming it stops start-up, naming why.
    d.env["AGENTOPS_MODEL"] = "sim"
    named = d.manage("check")
    assert named.returncode != 0
    assert "AGENTOPS_MODEL='sim': unknown model provider 'sim'" in named.stderr


@pytest.mark.django_db
def test_only_a_lab_run_shows_the_simulated_devices():
    lab_run = start_run("room_temperature", thread_id="t-lab", input={"question": "warm?"})
    user_run = start_run("fanout_demo", thread_id="t-user", input={"items": 1, "delay_s": 0})
    assert {"calls", "devices"} <= set(run_status(lab_run))
    assert {"calls", "devices"} & set(run_status(user_run)) == set()
    shown = {}
    for run in (lab_run, user_run):
        out = io.StringIO()
        call_command("runs", "status", str(run.pk), stdout=out)
        shown[run.workflow] = out.getvalue()
    assert "device calls: {}" in shown["room_temperature"]
    assert 'devices: {"lamp.brightness": ' in shown["room_temperature"]
    assert "device" not in shown["fanout_demo"]
