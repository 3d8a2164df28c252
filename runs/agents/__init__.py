"""Model providers and Pydantic AI agents as AgentOps workflows.

``register_agent``, ``AgentTool`` and ``current_call`` are loaded on first use, so a
process that only uses the simulator does not import Pydantic AI.
"""

_exports = {
    "register_agent": "runs.agents.workflow",
    "AgentWorkflow": "runs.agents.workflow",
    "AgentTool": "runs.agents.durability",
    "current_call": "runs.agents.durability",
}


def __getattr__(name: str):
    from importlib import import_module

    try:
        module = _exports[name]
    except KeyError:
        raise AttributeError(f"module 'runs.agents' has no attribute {name!r}") from None
    return getattr(import_module(module), name)


__all__ = list(_exports)
