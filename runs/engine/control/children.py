"""Child runs: a step starts runs of another workflow and waits for them without a lease.

A child step's function returns the children's inputs. ``start_children`` starts the
missing ones in transactions fenced by the step's attempt, each keyed by the parent
step and its position (a unique constraint), so an attempt that runs again after a
crash finds the children it started and starts none twice. ``commit_child_wait`` then
ends the attempt: the step goes WAITING with its lease released and the run WAITING_EXTERNAL,
unless the children are finished already. A child's terminal move wakes its parent
(``on_run_finished``, after that commit): once every child succeeded the step succeeds
with their results and the run goes on; a child that failed or was cancelled fails the
step and the run with the child's error code. A parent that ends while attached
children are open cancels them. The sweeper repeats both for a process that died
between a commit and its hook (``settle_children``).
"""

import logging
from typing import Any

from django.db import connection
from django.db.models import Exists, OuterRef, Q, Subquery
from django.db.models.functions import Now

from runs.engine import hooks
from runs.engine.control.cancel import request_cancel
from runs.engine.control.lifecycle import start_run
from runs.engine.effects import compensation
from runs.engine.errors import ControlError, LeaseLost, StepError
from runs.engine.state.gateway import RunTx, attempt_holds, run_transaction
from runs.models import Run, Step
from runs.states import RUN_TERMINAL, RunStatus, StepStatus
from runs.workflows import registry
from runs.workflows.definition import Workflow

logger = logging.getLogger("agentops.children")

#: Error code of a child step whose function returned no valid inputs for its children
#: (never retried: the same code returns the same inputs).
CHILD_INPUT_INVALID = "CHILD_INPUT_INVALID"
#: Error code of a child step whose child was cancelled (or failed without a code).
CHILD_CANCELLED = "CHILD_CANCELLED"
CHILD_FAILED = "CHILD_FAILED"
#: Most children one step may start.
MAX_CHILDREN = 1000
#: Children started in one transaction (the parent's row is locked meanwhile).
CHILDREN_PER_TRANSACTION = 50


def start_children(ctx, output: Any, worker_id: str) -> list[Any]:
    """Called by the executor, while the step's heartbeat keeps its lease, when a child
    step's function returned ``output`` (the child's input dict; with ``many`` a list of
    them): start the children not started yet, ``CHILDREN_PER_TRANSACTION`` at a time,
    each transaction holding the step at this attempt. Returns every child's run id by
    position. Raises ``StepError`` (``CHILD_INPUT_INVALID``) for inputs that are not
    JSON objects, too many of them, or inputs the child workflow refuses (that batch is
    not started) and ``LeaseLost`` when the attempt no longer holds the step."""
    inputs = _inputs(output, ctx.step_def.options["many"])
    started: dict[int, Any] = {}
    for first in range(0, max(len(inputs), 1), CHILDREN_PER_TRANSACTION):
        batch = inputs[first : first + CHILDREN_PER_TRANSACTION]
        started.update(_start_batch(ctx, first, batch, worker_id))
    # A crash here leaves children started and the wait unrecorded: the next attempt
    # finds them by their key.
    hooks.reached(hooks.CHILDREN_STARTED, ctx.run, ctx.step)
    return [started[p] for p in sorted(started)]


def commit_child_wait(ctx, children: list[Any], worker_id: str) -> None:
    """Called by the executor after ``start_children`` returned the run ids
    ``children``: fenced by the attempt, put the step in WAITING (lease released, run
    WAITING_EXTERNAL) or, when every child has finished already, settle it. A detached
    step succeeds at once with ``{"children": [run ids]}``. A cancel requested
    meanwhile cancels the step instead."""
    run, step, attempt, options = ctx.run, ctx.step, ctx.attempt, ctx.step_def.options
    with run_transaction(run.pk) as tx:
        if tx.cancelled_before_wait(step, attempt, actor=worker_id, waiting_for="child wait"):
            return
        ids = [str(pk) for pk in children]
        if options["detached"]:
            result = {"children": ids}
            if tx.finish_attempt(
                step,
                attempt,
                StepStatus.SUCCEEDED,
                actor=worker_id,
                payload={"attempt": attempt, "children": ids, "detached": True},
                output=result,
                owner="",
                lease_until=None,
                finished_at=Now(),
            ):
                tx.advance(
                    step,
                    output=result,
                    next_name=ctx.workflow.next_after(step.name),
                    actor=worker_id,
                    reason="detached children started",
                )
            return
        if not tx.finish_waiting(
            step,
            attempt,
            actor=worker_id,
            waiting_for="children",
            payload={"children": len(ids)},
            cancel_before="child wait",
        ):
            return
        tx.transition_run(
            RunStatus.WAITING_EXTERNAL,
            actor=worker_id,
            reason=f"waiting for {len(ids)} child run(s)",
            current_step=step.pk,
        )
        settle(tx, step, ctx.workflow, worker_id)


def _inputs(output: Any, many: bool) -> list[dict]:
    """The children's inputs from the step function's return value."""
    inputs = output if many else [output]
    if not isinstance(inputs, list) or not all(isinstance(i, dict) for i in inputs):
        shape = "a list of JSON objects" if many else "a JSON object"
        raise StepError(CHILD_INPUT_INVALID, f"a child step returns the children's inputs: {shape}")
    if len(inputs) > MAX_CHILDREN:
        raise StepError(CHILD_INPUT_INVALID, f"at most {MAX_CHILDREN} children per step")
    return inputs


def _start_batch(ctx, first: int, inputs: list[dict], worker_id: str) -> dict[int, Any]:
    """Start the children at positions ``first``, ``first + 1``, ... that are not
    started yet, in one transaction that holds the step at this attempt; returns
    ``{position: run id}`` of the batch."""
    run, step, options = ctx.run, ctx.step, ctx.step_def.options
    with run_transaction(run.pk) as tx:
        if not attempt_holds(step.pk, ctx.attempt):
            raise LeaseLost(f"attempt {ctx.attempt} no longer holds {step.name}")
        started: dict[int, Any] = {
            position: pk
            for position, pk in Run.objects.filter(
                parent_step_id=step.pk,
                child_position__gte=first,
                child_position__lt=first + len(inputs),
            ).values_list("child_position", "pk")
            if position is not None
        }
        for position, child_input in enumerate(inputs, start=first):
            if position in started:
                continue
            thread_id = (
                tx.run.thread.thread_id
                if options["thread"] == "parent"
                else f"{run.pk}/{step.name}/{position}"
            )
            try:
                child = start_run(
                    options["workflow"],
                    thread_id=thread_id,
                    input=child_input,
                    owner=tx.run.owner,
                    actor=worker_id,
                    parent_step=step,
                    child_position=position,
                    detached=options["detached"],
                )
            except ControlError as exc:
                # Rolls back the children started in this transaction too.
                raise StepError(
                    CHILD_INPUT_INVALID,
                    f"child {position} of {step.name}: {exc.message} {exc.errors or ''}".strip(),
                ) from exc
            started[position] = child.pk
            tx.event(
                "child.started",
                {"run_id": str(child.pk), "workflow": child.workflow, "position": position},
                step_id=step.pk,
                actor=worker_id,
            )
    return started


def settle(tx: RunTx, step: Step, workflow: Workflow, actor: str) -> bool:
    """Inside the transaction of the parent run (WAITING_EXTERNAL, ``step`` WAITING for
    its children): when every child succeeded, the step succeeds with their results
    (with ``many`` a list by position, else the one child's) and the run goes on; when
    a child failed or was cancelled, the step and the run fail with its error code
    (``CHILD_FAILED``/``CHILD_CANCELLED`` when it has none) and the run's compensation
    is scheduled. Returns ``True`` when the step was settled, ``False`` while a child is
    still open."""
    # Called once per child's end: two index probes until the last one, so K children
    # cost O(K) reads in all, not O(K^2).
    children = Run.objects.filter(parent_step_id=step.pk, detached=False)
    failed = (
        children.filter(status__in=(RunStatus.FAILED, RunStatus.CANCELLED))
        .order_by("child_position")
        .first()
    )
    if failed is None and children.exclude(status__in=RUN_TERMINAL).exists():
        return False
    if failed is not None:
        code = failed.error_code or (
            CHILD_CANCELLED if failed.status == RunStatus.CANCELLED else CHILD_FAILED
        )
        detail = (
            f"child run {failed.pk} ({failed.workflow}, position {failed.child_position}) "
            f"{failed.status.lower()}: {failed.error_detail or failed.cancel_reason}"
        )[:4000]
        if not tx.transition_step(
            step.pk,
            StepStatus.FAILED,
            expected=StepStatus.WAITING,
            actor=actor,
            payload={"child": str(failed.pk), "error_code": code, "error_detail": detail[:500]},
            error_code=code,
            error_detail=detail,
            finished_at=Now(),
        ):
            return False
        tx.transition_run(
            RunStatus.FAILED,
            actor=actor,
            reason=f"{step.name}: {code}",
            finished_at=Now(),
            current_step=None,
            error_code=code,
            error_detail=detail,
        )
        compensation.schedule(tx, actor=actor, reason=f"run failed at {step.name}: {code}")
        return True
    results = list(
        children.order_by("child_position")
        .annotate(result=Subquery(_result_query(), output_field=Step._meta.get_field("output")))
        .values_list("result", flat=True)
    )
    output = results if workflow.get(step.name).options["many"] else results[0]
    if not tx.transition_step(
        step.pk,
        StepStatus.SUCCEEDED,
        expected=StepStatus.WAITING,
        actor=actor,
        payload={"children": len(results)},
        output=output,
        finished_at=Now(),
    ):
        return False
    tx.advance(
        step,
        output=output,
        next_name=workflow.next_after(step.name),
        actor=actor,
        reason="child runs finished",
    )
    return True


def _result_query():
    """A finished run's result, as a subquery of its row: the output of the step that
    finished it (its current generation's last succeeded step), NULL when none."""
    return (
        Step.objects.filter(
            run_id=OuterRef("pk"), generation=OuterRef("generation"), status=StepStatus.SUCCEEDED
        )
        .order_by("-seq")
        .values("output")[:1]
    )


def wake_parent(parent_run_id, step_id: int, actor: str) -> bool:
    """A child of ``step_id`` finished: settle that step if its run still waits for it
    (a paused or cancel-requested parent is left alone; the sweeper settles it once it
    waits again). Returns ``True`` when the step was settled."""
    with run_transaction(parent_run_id) as tx:
        if tx.run.status != RunStatus.WAITING_EXTERNAL:
            return False
        step = Step.objects.filter(
            pk=step_id, status=StepStatus.WAITING, generation=tx.run.generation
        ).first()
        if step is None:
            return False
        workflow = registry.get(tx.run.workflow, tx.run.workflow_version)
        return settle(tx, step, workflow, actor)


def cancel_orphan(run_id, parent_run_id, parent_status: str, actor: str) -> None:
    """Cancel the attached child ``run_id`` of a parent that ended (with compensation
    where the child's workflow defines it); a child that ended meanwhile is left as
    it is."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.status in RUN_TERMINAL:
        return
    try:
        request_cancel(run, actor=actor, reason=f"parent run {parent_run_id} is {parent_status}")
    except ControlError as exc:
        if exc.code != "run_terminal":
            raise


_FAMILY_SQL = """
SELECT r.parent_run_id, r.parent_step_id, r.detached, EXISTS (
    SELECT 1 FROM runs_run c
    WHERE c.parent_run_id = r.id AND NOT c.detached
      AND c.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
)
FROM runs_run r WHERE r.id = %s
"""


def on_run_finished(run_id, thread_id: int, status: str, thread_locked: bool) -> None:
    """Run-finished hook (after the commit that ended ``run_id``): wake the parent step
    waiting for this run, and cancel this run's open attached children. One query when
    the run has neither."""
    # Every finished run pays for this: one probe by primary key with the open children
    # as an EXISTS on the parent_run index, in plain SQL (the ORM's compilation of it
    # cost several times the query).
    with connection.cursor() as cursor:
        cursor.execute(_FAMILY_SQL, [Run._meta.pk.get_db_prep_value(run_id, connection)])
        row = cursor.fetchone()
    if row is None:
        return
    parent_run_id, parent_step_id, detached, has_open = row
    if parent_step_id is not None and not detached:
        wake_parent(parent_run_id, parent_step_id, actor="children")
    if has_open:
        for pk in list(_open_children(run_id).values_list("pk", flat=True)):
            cancel_orphan(pk, run_id, status, actor="children")


def _open_children(parent_run_id):
    """The attached children of ``parent_run_id`` (an id or an ``OuterRef``) that have
    not ended."""
    return Run.objects.filter(parent_run_id=parent_run_id, detached=False).exclude(
        status__in=RUN_TERMINAL
    )


def settle_children(actor: str, batch: int) -> int:
    """Sweeper task for a process that died between a run's end and its hook: settle
    the child waits whose children are all finished (or one failed), and cancel the
    open attached children of ended parents and of parent steps nobody waits on any
    more (superseded by a resume from an earlier checkpoint, or cancelled). Returns how
    many it moved."""
    children = Run.objects.filter(parent_step=OuterRef("pk"), detached=False)
    due = list(
        Step.objects.filter(status=StepStatus.WAITING, run__status=RunStatus.WAITING_EXTERNAL)
        .filter(Exists(children))
        .filter(
            Exists(children.filter(status__in=(RunStatus.FAILED, RunStatus.CANCELLED)))
            | ~Exists(children.exclude(status__in=RUN_TERMINAL))
        )
        .values_list("run_id", "pk")[:batch]
    )
    moved = sum(1 for run_id, step_id in due if wake_parent(run_id, step_id, actor))
    orphans = list(
        Run.objects.filter(detached=False)
        .filter(
            Q(parent_run__status__in=RUN_TERMINAL)
            | Q(parent_step__status__in=(StepStatus.SUPERSEDED, StepStatus.CANCELLED))
        )
        .exclude(status__in=(*RUN_TERMINAL, RunStatus.CANCEL_REQUESTED))
        .values_list("pk", "parent_run_id", "parent_run__status", "parent_step__status")[:batch]
    )
    for pk, parent_run_id, run_status, step_status in orphans:
        ended = (
            run_status if run_status in RUN_TERMINAL else f"{run_status} (its step {step_status})"
        )
        cancel_orphan(pk, parent_run_id, ended, actor)
    return moved + len(orphans)


def open_children(step: Step) -> tuple[int, int]:
    """``(open, total)`` attached children of ``step``."""
    children = Run.objects.filter(parent_step_id=step.pk, detached=False)
    return children.exclude(status__in=RUN_TERMINAL).count(), children.count()


__all__ = [
    "CHILD_CANCELLED",
    "CHILD_FAILED",
    "CHILD_INPUT_INVALID",
    "commit_child_wait",
    "start_children",
    "on_run_finished",
    "open_children",
    "settle",
    "settle_children",
    "wake_parent",
]
