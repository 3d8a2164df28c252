"""Map steps: the fan-out into branch rows and the join once every branch finished.

A map step's row (``Workflow.map``) runs ``over(ctx)`` and commits the fan-out: the row
WAITING (``step.waiting``, waiting for its branches, no lease held) and one PENDING
branch row per item (``RunTx.schedule_branches``). Each branch is a step of its own:
claimed by any worker and slot, retried under the map step's policy, its calls keyed by
the step and its position (``ledger.step_scope``). Every branch's end is committed under
the run's row lock, so the commit that leaves no sibling open is the one that joins:
the map step SUCCEEDED with the results in input order, its checkpoint saved and the
next declared step scheduled (``RunTx.advance``), exactly once.

A branch failing after its retries either fails the run (``on_failure="fail"``: its open
siblings are cancelled, the map step FAILED) or counts as finished
(``on_failure="partial"``: the join gets ``{"results", "failed"}``).
"""

from typing import Any

from django.db.models import Count
from django.db.models.functions import Now

from runs.engine.data import payloads
from runs.engine.errors import StepError
from runs.engine.execution import dispatch
from runs.engine.state import values
from runs.engine.state.gateway import RunTx, run_transaction
from runs.models import Step
from runs.states import STEP_OPEN, RunStatus, StepStatus
from runs.workflows import registry
from runs.workflows.definition import MAX_BRANCHES, StepDef, Workflow

#: Error code of a map step whose ``over(ctx)`` did not return a list of JSON values.
INVALID_ITEMS = "INVALID_ITEMS"
#: Error code of a map step whose ``over(ctx)`` returned more than ``MAX_BRANCHES`` items.
TOO_MANY_BRANCHES = "TOO_MANY_BRANCHES"


def branch_counts(run_id) -> dict[int, dict[str, int]]:
    """``{map step row id: {status: branches}}`` for every step of the run that fanned
    out, counted in one grouped query whatever the number of branches."""
    counted: dict[int, dict[str, int]] = {}
    for parent_id, status, n in (
        Step.objects.filter(run_id=run_id, branch_of__isnull=False)
        .values_list("branch_of_id", "status")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        counted.setdefault(parent_id, {})[status] = n
    return counted


def is_branch(step: Step) -> bool:
    """True for a branch row of a map step (not the row that fanned out)."""
    return step.branch_of_id is not None


def items_of(ctx) -> list[Any]:
    """The items the map step of ``ctx`` fans out over: ``over(ctx)`` checked. Raises
    ``StepError`` (``INVALID_ITEMS``: not a list or tuple, or an item no database
    stores; ``TOO_MANY_BRANCHES``: more than ``MAX_BRANCHES``), never retried."""
    items = ctx.step_def.options["over"](ctx)
    if not isinstance(items, list | tuple):
        raise StepError(
            INVALID_ITEMS, f"over= must return a list of items, not {type(items).__name__}"
        )
    if len(items) > MAX_BRANCHES:
        raise StepError(
            TOO_MANY_BRANCHES,
            f"{len(items)} items; a map step fans out into {MAX_BRANCHES} at most",
        )
    try:
        return list(values.storable(list(items), "map items"))
    except values.InvalidValue as exc:
        raise StepError(INVALID_ITEMS, str(exc)) from exc


def commit_fan_out(ctx, items: list[Any], actor: str) -> None:
    """Commit the fan-out of the claimed map step of ``ctx`` behind its fence: the step
    WAITING for its branches, one PENDING branch per item. An empty list joins at once
    (output ``[]``). A refused fence changes nothing (``step.commit_rejected``); a cancel
    requested meanwhile cancels the step and makes no branch."""
    step, attempt = ctx.step, ctx.attempt
    with run_transaction(ctx.run.pk) as tx:
        if not tx.finish_waiting(
            step,
            attempt,
            actor=actor,
            waiting_for="branches",
            payload={"branches": len(items)},
            cancel_before="fan-out",
        ):
            return
        if tx.schedule_branches(step, items, actor=actor) == 0:
            join_when_done(tx, step.pk, workflow=ctx.workflow, actor=actor)


def commit_branch(ctx, output: Any, actor: str, write_messages) -> int | None:
    """Commit the claimed branch of ``ctx`` SUCCEEDED with ``output`` (checked by the
    caller) behind its fence, with its staged messages (``write_messages(tx)``), and
    join when it was the last open one. Returns the join's next step id, or ``None``."""
    step, attempt = ctx.step, ctx.attempt
    with run_transaction(ctx.run.pk) as tx:
        if not tx.finish_attempt(
            step,
            attempt,
            StepStatus.SUCCEEDED,
            actor=actor,
            payload={"attempt": attempt, "worker": actor, "position": step.position},
            output=payloads.externalize(ctx.run.pk, output),
            finished_at=Now(),
            lease_until=None,
            owner=actor,
            error_code="",
            error_detail="",
        ):
            return None
        write_messages(tx)
        assert step.branch_of_id is not None, "commit_branch is called for branches only"
        return join_when_done(tx, step.branch_of_id, workflow=ctx.workflow, actor=actor)


def join_when_done(tx: RunTx, parent_id: int, *, workflow: Workflow, actor: str) -> int | None:
    """Under ``tx``'s run lock: when no branch of the map step row ``parent_id`` is open,
    the map step SUCCEEDED with its output (the results in input order; with
    ``on_failure="partial"`` ``{"results", "failed"}``), its checkpoint saved and the
    next declared step scheduled or the run finished. Returns the next step's id, or
    ``None`` (branches still open, a failed one waiting for a person's retry under
    ``on_failure="fail"``, already joined, or the run not RUNNING or PENDING)."""
    if tx.run.status not in (RunStatus.RUNNING, RunStatus.PENDING):
        # Paused or stopping: a paused run's branches are retried (and join) after the
        # person decided; a stopping one joins nothing.
        return None
    if Step.objects.filter(branch_of_id=parent_id, status__in=STEP_OPEN).exists():
        return None
    parent = Step.objects.get(pk=parent_id)
    step_def = workflow.get(parent.name)
    if (
        step_def.options.get("on_failure") != "partial"
        and Step.objects.filter(branch_of_id=parent_id, status=StepStatus.FAILED).exists()
    ):
        # A failed branch waits for a person's retry (its takeover): no join without it.
        return None
    output = _joined_output(parent, step_def)
    if not tx.transition_step(
        parent.pk,
        StepStatus.SUCCEEDED,
        expected=StepStatus.WAITING,
        actor=actor,
        event_type="step.joined",
        payload=_join_summary(output),
        output=payloads.externalize(tx.run.pk, output),
        finished_at=Now(),
    ):
        return None
    advanced = tx.advance(
        parent, output=output, next_name=workflow.next_after(parent.name), actor=actor
    )
    return advanced.step_id


def _joined_output(parent: Step, step_def: StepDef) -> Any:
    """The map step's output from its branch rows, read in one query in position
    order."""
    results: list[Any] = []
    failed: list[dict[str, Any]] = []
    rows = (
        Step.objects.filter(branch_of_id=parent.pk)
        .order_by("position")
        .values_list("position", "status", "output", "input", "error_code", "error_detail")
    )
    for position, status, output, item, error_code, error_detail in rows:
        if status == StepStatus.SUCCEEDED:
            results.append(output)
            continue
        results.append(None)
        failed.append(
            {
                "position": position,
                "item": (item or {}).get("item"),
                "error_code": error_code or status,
                "error_detail": error_detail[:500],
            }
        )
    if step_def.options.get("on_failure") == "partial":
        return {"results": results, "failed": failed}
    return results


def _join_summary(output: Any) -> dict[str, Any]:
    if isinstance(output, dict):
        return {"branches": len(output["results"]), "failed": len(output["failed"])}
    return {"branches": len(output), "failed": 0}


def branch_failed(
    tx: RunTx, branch: Step, step_def: StepDef, *, error_code: str, actor: str, reason: str
) -> bool:
    """Under ``tx``'s run lock, after ``branch`` moved to FAILED for good: with
    ``on_failure="partial"`` the branch counts as finished (the join runs when it was
    the last one) and ``True`` is returned; with ``"fail"`` its open siblings are
    cancelled and the map step FAILED, and ``False`` tells the caller to fail the run
    (or open its takeover) as for any step."""
    parent_id = branch.branch_of_id
    assert parent_id is not None, "branch_failed is called for branches only"
    if step_def.options.get("on_failure") == "partial":
        workflow = registry.get(tx.run.workflow, tx.run.workflow_version)
        join_when_done(tx, parent_id, workflow=workflow, actor=actor)
        return True
    if step_def.on_exhausted == "takeover":
        # A person decides about this branch; its siblings go on meanwhile.
        return False
    tx.cancel_branches(parent_id, actor=actor, reason=reason)
    tx.transition_step(
        parent_id,
        StepStatus.FAILED,
        expected=StepStatus.WAITING,
        actor=actor,
        payload={"reason": reason, "position": branch.position},
        error_code=error_code,
        finished_at=Now(),
    )
    return False


def waiting_map_steps(tx: RunTx) -> list[int]:
    """Ids of the locked run's map step rows (current generation) that wait for their
    branches, in seq order."""
    return list(
        Step.objects.filter(
            run_id=tx.run.pk,
            generation=tx.run.generation,
            status=StepStatus.WAITING,
            branch_of__isnull=True,
            branches__isnull=False,
        )
        .distinct()
        .order_by("seq")
        .values_list("pk", flat=True)
    )


def resume_fan_out(tx: RunTx, parent_ids: list[int], *, actor: str) -> int:
    """Under ``tx``'s lock, the run RUNNING again after a pause: the PENDING branches
    of the map step rows ``parent_ids`` (held while the pause was requested and while
    the run was PAUSED) are notified again at once, in pipelined batches after the
    commit, and each map step none of whose branches is open joins now. Returns how
    many branches were notified."""
    held = list(
        Step.objects.filter(
            run_id=tx.run.pk, branch_of_id__in=parent_ids, status=StepStatus.PENDING
        ).values_list("pk", flat=True)
    )
    if held:
        Step.objects.filter(pk__in=held).update(notified_at=Now(), not_before=Now())
        dispatch.notify_many_on_commit(tx.run.pk, held)
    workflow = registry.get(tx.run.workflow, tx.run.workflow_version)
    for parent_id in parent_ids:
        join_when_done(tx, parent_id, workflow=workflow, actor=actor)
    return len(held)
