"""Workflows declared by name and imported only when a process first needs one
(``register_lazy``). A Pydantic AI example agent brings pydantic-ai and its
HTTP stack (about 40 MB) into every process that imports it; a worker that never runs
it never pays for it."""

from agentops.authoring import register_lazy

register_lazy("capital_agent", 1, "runs.workflows.capital_agent")
register_lazy("export_agent", 1, "runs.workflows.export_agent")
