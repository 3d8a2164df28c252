"""The process-wide registry of workflow definitions, keyed by (name, version)."""

from importlib import import_module
from typing import TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from runs.workflows.definition import Workflow, WorkflowDefinitionError

#: A Workflow or a subclass of it: ``register`` hands back what it was given.
_W = TypeVar("_W", bound=Workflow)

_registry: dict[tuple[str, int], Workflow] = {}
#: Workflows declared with ``register_lazy``: (name, version) -> the module that
#: registers the definition when imported.
_lazy: dict[tuple[str, int], str] = {}


class UnknownWorkflow(LookupError):
    """Raised when no registered workflow matches a name (and version).

    ``name`` and ``version`` (``None`` when any version would do) say what was asked;
    the message lists the registered names (or that name's versions), so a caller can
    show the valid choices.
    """

    def __init__(self, name: str, version: int | None = None):
        what = name if version is None else f"{name}@{version}"
        versions = sorted(v for (n, v) in [*_registry, *_lazy] if n == name)
        if version is not None and versions:
            known = "registered versions: " + ", ".join(str(v) for v in versions)
        else:
            known = "registered workflows: " + ", ".join(names())
        super().__init__(f"unknown workflow {what}; {known}")
        self.name = name
        self.version = version


def register(workflow: _W) -> _W:
    """Add ``workflow``; registering the same object twice is a no-op, a different
    definition under the same (name, version) raises ``WorkflowDefinitionError``."""
    key = (workflow.name, workflow.version)
    existing = _registry.get(key)
    if existing is not None and existing is not workflow:
        raise WorkflowDefinitionError(f"{workflow.name}@{workflow.version} registered twice")
    _registry[key] = workflow
    _lazy.pop(key, None)
    return workflow


def register_lazy(name: str, version: int, module: str) -> None:
    """Declare ``name@version`` without importing it: ``module`` (a dotted path) is
    imported the first time the definition is needed (``get``, ``all_workflows``) and
    must ``register`` it then. A process that never runs the workflow never pays for its
    imports (a Pydantic AI agent brings about 40 MB into a worker). The start-up check
    of models (``runs.agents.config``) does not see it: declare lazily only a workflow
    that names no model of its own."""
    if (name, version) not in _registry:
        _lazy[(name, version)] = module


def _load(key: tuple[str, int]) -> None:
    module = _lazy.get(key)
    if module is None:
        return
    import_module(module)
    if key not in _registry:
        raise WorkflowDefinitionError(f"{module} did not register {key[0]}@{key[1]}")


def unregister(name: str, version: int) -> None:
    """Remove a definition (tests simulate code that lacks a version with it)."""
    _registry.pop((name, version), None)


def get(name: str, version: int | None = None) -> Workflow:
    """The workflow ``name`` at ``version`` (latest when ``None``); raises ``UnknownWorkflow``."""
    if version is None:
        versions = [v for (n, v) in [*_registry, *_lazy] if n == name]
        if not versions:
            raise UnknownWorkflow(name)
        version = max(versions)
    _load((name, version))
    try:
        return _registry[(name, version)]
    except KeyError:
        raise UnknownWorkflow(name, version) from None


def names() -> list[str]:
    """The registered workflow names, sorted, each once."""
    return sorted({n for (n, _) in [*_registry, *_lazy]})


def loaded_keys() -> list[str]:
    """``"<name>@<version>"`` of every definition imported in this process (lazily
    declared ones only once loaded). A claim that must not wait for an import while its
    lease runs takes these; anything else goes through ``get`` first."""
    return [f"{n}@{v}" for (n, v) in sorted(_registry)]


def all_workflows(*, load: bool = True) -> list[Workflow]:
    """Every registered definition, sorted by name then version; ``load=False`` leaves
    lazy ones (``register_lazy``) not imported yet out instead of importing them."""
    if load:
        for key in list(_lazy):
            _load(key)
    return [_registry[k] for k in sorted(_registry)]


def autodiscover() -> None:
    """Import the modules named in ``settings.AGENTOPS_WORKFLOW_MODULES``; each registers
    its workflows at import time. Raises ``ImproperlyConfigured`` for a module that
    cannot be imported, naming ``AGENTOPS_EXTRA_WORKFLOW_MODULES`` when it came from
    there and the missing dependency otherwise."""
    extra = set(getattr(settings, "AGENTOPS_EXTRA_WORKFLOW_MODULES", []))
    for module in settings.AGENTOPS_WORKFLOW_MODULES:
        try:
            import_module(module)
        except ImportError as exc:
            if module in extra:
                where = "AGENTOPS_EXTRA_WORKFLOW_MODULES"
                raise ImproperlyConfigured(f"{where}: cannot import {module!r}: {exc}") from None
            raise ImproperlyConfigured(
                f"workflow module {module!r} cannot be imported ({exc}); "
                "install the dependencies: pip install -e ."
            ) from None
