"""Checkpoint state: the minimum to resume a run (DESIGN section 3, Checkpoint)."""

from typing import Any

from runs.models import Checkpoint, Run, Step

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
        "budget_used": run.usage(),
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
        run.refresh_from_db(fields=["model_calls", "tool_calls", "cost_usd"])
    state["budget_used"] = run.usage()
    return state


def latest_state(run: Run) -> dict[str, Any]:
    """The state of the run's latest checkpoint in its current generation (``{}`` when
    there is none)."""
    checkpoint = (
        Checkpoint.objects.filter(run_id=run.pk, generation=run.generation).order_by("-pk").first()
    )
    return checkpoint.state if checkpoint else {}


def store(
    run: Run, step: Step | None, name: str, previous: dict[str, Any], state: dict[str, Any]
) -> Checkpoint:
    """Insert the checkpoint ``name`` of the run's current generation holding ``state``
    (``previous`` is the state it was derived from)."""
    return Checkpoint.objects.create(
        run_id=run.pk,
        step_id=step.pk if step else None,
        name=name,
        generation=run.generation,
        state=state,
    )
