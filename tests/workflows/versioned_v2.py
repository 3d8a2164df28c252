"""Code that knows ``versioned@2`` only, with a migration from version 1 checkpoints."""

from agentops.authoring import register
from tests.workflows.versioned import build


def from_v1(state: dict) -> dict:
    """Version 2 keeps ``first``'s output under the same name, marked as migrated."""
    outputs = dict(state.get("outputs", {}))
    if "first" in outputs:
        outputs["first"] = {**outputs["first"], "migrated_from": 1}
    return {**state, "outputs": outputs}


register(build(2, migrate_from={1: from_v1}))
