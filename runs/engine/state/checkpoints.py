"""Checkpoint state: the minimum to resume a run (DESIGN section 3, Checkpoint)."""

from typing import Any

from runs.engine.effects.budget import usage
from runs.models import Run, Step

STATE_VERSION = 1


def initial_state(run: Run, first_step: str) -> dict[str, Any]:
    """The ``start`` checkpoint's state for a new run."""
    return {
        "phase": first_step,
        "input": run.input,
        "completed": [],
        "outputs": {},
        "message_seq": 0,
        "artifacts": [],
        "budget_used": usage(run),
        "workflow": run.workflow,
        "workflow_version": run.workflow_version,
        "generation": run.generation,
        "next_allowed": [first_step],
        "pending_approval": None,
    }


def next_state(
    previous: dict[str, Any],
    *,
    run: Run,
    step: Step,
    output: Any,
    next_name: str | None,
    message_seq: int,
    refresh_usage: bool = True,
) -> dict[str, Any]:
    """The ``after:<step>`` state: ``previous`` plus this step's output.

    ``refresh_usage=False`` trusts ``run``'s usage counters (the caller holds the row
    lock taken after the last charge); by default they are re-read.
    """
    state = dict(previous)
    state["outputs"] = {**previous.get("outputs", {}), step.name: output}
    state["completed"] = [*previous.get("completed", []), step.name]
    state["phase"] = next_name
    state["next_allowed"] = [next_name] if next_name else []
    state["message_seq"] = message_seq
    state["generation"] = run.generation
    state["workflow_version"] = run.workflow_version
    if refresh_usage:
        run.refresh_from_db(
            fields=["model_calls", "tool_calls", "cost_usd", "tokens", "unpriced_model_calls"]
        )
    state["budget_used"] = usage(run)
    return state
