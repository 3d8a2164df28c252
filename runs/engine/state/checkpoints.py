"""Checkpoint state: the minimum to resume a run.

A checkpoint stores what changed since the one it was derived from plus a reference to
it (``Checkpoint.base``), so a run of n steps stores O(n) checkpoint data instead of
n whole states of growing size; ``materialize`` rebuilds a whole state along the chain
in one query (``runs.checkpoint_data``). A checkpoint without a base stores a whole
state.
"""

from typing import Any

from runs.checkpoint_data import DELTA, WHOLE, apply, delta, materialize
from runs.engine.data import payloads
from runs.models import Checkpoint, Run, Step

__all__ = ["apply", "delta", "latest", "latest_state", "materialize", "next_state", "store"]


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
        run.refresh_from_db(
            fields=["model_calls", "tool_calls", "cost_usd", "tokens", "unpriced_model_calls"]
        )
    state["budget_used"] = run.usage()
    return state


def latest(run: Run) -> tuple[int | None, dict[str, Any]]:
    """``(id, whole state)`` of the run's latest checkpoint in its current generation;
    ``(None, {})`` when there is none."""
    checkpoint = (
        Checkpoint.objects.filter(run_id=run.pk, generation=run.generation).order_by("-pk").first()
    )
    return (checkpoint.pk, checkpoint.state) if checkpoint else (None, {})


def latest_state(run: Run) -> dict[str, Any]:
    """The whole state of the run's latest checkpoint in its current generation (``{}``
    when there is none)."""
    return latest(run)[1]


def store(
    run: Run,
    step: Step | None,
    name: str,
    state: dict[str, Any],
    *,
    base_id: int | None = None,
    previous: dict[str, Any] | None = None,
) -> Checkpoint:
    """Insert the checkpoint ``name`` of the run's current generation for ``state``:
    as a delta on checkpoint ``base_id`` when ``previous`` (that checkpoint's whole
    state) is given and ``state`` extends it, else whole."""
    change = delta(previous, state) if base_id is not None and previous is not None else None
    checkpoint = Checkpoint(
        run_id=run.pk,
        step_id=step.pk if step else None,
        name=name,
        generation=run.generation,
    )
    # Large strings go to the run's payload store (runs.engine.data.payloads).
    if change is None:
        checkpoint.data, checkpoint.version = payloads.externalize(run.pk, state), WHOLE
    else:
        checkpoint.data = payloads.externalize(run.pk, change)
        checkpoint.base_id, checkpoint.version = base_id, DELTA
    checkpoint.__dict__["_whole_state"] = state
    checkpoint.save(force_insert=True)
    return checkpoint
