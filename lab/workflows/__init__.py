"""The workflows that exist to show the simulator (``lab.sim``): the quick start's
``room_temperature``, ``chat``, ``dim_lights``, ``book_trip``, ``weekly_report``, the
``support_agent`` example agent, and the bench, drill and soak workflows of
``synthetic``. The lab app registers them when it starts (``register``); a deployment
without the lab has none of them."""

from importlib import import_module

from agentops.authoring import register_lazy

#: Modules imported when the lab app starts; each registers its workflows on import.
MODULES = (
    "lab.workflows.room_temperature",
    "lab.workflows.chat",
    "lab.workflows.dim_lights",
    "lab.workflows.book_trip",
    "lab.workflows.weekly_report",
    "lab.workflows.synthetic",
)


def register() -> None:
    """Register the lab's workflows: import ``MODULES``, and declare ``support_agent``
    by name (imported on first use: its Pydantic AI agent brings about 40 MB into a
    process)."""
    for module in MODULES:
        import_module(module)
    register_lazy("support_agent", 1, "lab.workflows.support_agent")
