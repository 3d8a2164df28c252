"""Replay a finished run from one of its checkpoints.

A replay never reopens the terminal original: it creates a NEW run in the same thread
that starts from a checkpoint of the original (``Run.replay_of`` and
``Run.replay_checkpoint`` on the new run; the original lists it through ``replays``
and keeps its status, rows and events unchanged). The new run begins with:

- the checkpoint's state copied as its first checkpoint (same name, generation 1):
  input, completed steps and their outputs, artifact references, message position and
  budget usage, so nothing before the checkpoint runs again;
- the operations the original's later steps recorded SUCCEEDED, carried over into its
  own keys (``runs.engine.control.reuse``) unless ``reexecute`` (with a reason);
- the checkpoint's next step scheduled, not before ``start_after`` seconds (the bulk
  replay spaces its runs this way, so they start at most ``rate`` per second and the
  provider that just came back is not stampeded; the pacing lives in the database and
  survives the process that asked for it).

The event ``run.replay_created`` on the new run, with the operator as actor, is the
audit record: who replayed what, why, from which checkpoint, reusing what.
"""

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db.models import Exists, OuterRef, QuerySet

from runs.engine.control import reuse, rewind, step_listing
from runs.engine.control.refusals import ControlError, require_reason
from runs.engine.rules import MAX_CHARS, check_identifier, check_text, number_problem
from runs.engine.state import checkpoints
from runs.engine.state.gateway import run_transaction
from runs.models import Checkpoint, Run, Step
from runs.states import RUN_TERMINAL, RunStatus, StepStatus, command_allows, command_states
from runs.workflows import registry

#: Default pace of a bulk replay, in replays started per second.
DEFAULT_RATE = 5.0
#: Most runs one bulk replay may create.
BULK_LIMIT = 1000


@dataclass
class ReplayPlan:
    """What replaying ``original`` from ``checkpoint`` would do (changes nothing).

    ``steps_to_run``: the step names the replay runs, in order (approvals assumed
    approved, no ``goto``). ``steps_replaced``: the original's steps after the
    checkpoint, in seq order, as ``step_listing.listing``: ``{"name", "seq",
    "generation", "status", "error_code", "label"}`` per step and one row with counts
    per map step's branches (``fetch#2..10001 (10000 branches: SUCCEEDED 10000)``).
    ``operations_reused``: side effects recorded SUCCEEDED after the checkpoint whose
    results the replay reuses (``reuse.describe`` rows, with ``result``); empty when
    ``reexecute``.
    ``operations_may_repeat``: side effects that may happen again. ``replays``: ids of
    the replays the original already has.
    """

    original: Run
    checkpoint: Checkpoint
    steps_to_run: list[str]
    steps_replaced: list[dict[str, Any]]
    operations_reused: list[dict[str, Any]]
    operations_may_repeat: list[dict[str, Any]]
    reexecute: bool = False
    replays: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON shape for the CLI and API."""
        return {
            "run": str(self.original.pk),
            "status": self.original.status,
            "checkpoint": {
                "name": self.checkpoint.name,
                "generation": self.checkpoint.generation,
                "id": self.checkpoint.pk,
            },
            "steps_to_run": self.steps_to_run,
            "steps_replaced": self.steps_replaced,
            "reexecute": self.reexecute,
            "operations_reused": self.operations_reused,
            "operations_may_repeat": self.operations_may_repeat,
            "replays": self.replays,
        }


def replayable_checkpoints(run: Run) -> list[Checkpoint]:
    """The run's checkpoints a replay can start from, newest first: not of a superseded
    step, with a next step."""
    return [
        cp
        for cp in Checkpoint.objects.filter(run=run).select_related("step").order_by("-pk")
        if cp.state.get("phase") is not None
        and (cp.step is None or cp.step.status != StepStatus.SUPERSEDED)
    ]


def _cut(cp: Checkpoint) -> int:
    return cp.step.seq if cp.step else 0


def _first_unfinished(run: Run) -> Step | None:
    """The first step of the run's current generation that did not succeed (the failed
    or cancelled one), if any."""
    return (
        Step.objects.filter(run=run, generation=run.generation)
        .exclude(status=StepStatus.SUCCEEDED)
        .order_by("seq")
        .first()
    )


def default_checkpoint(run: Run) -> Checkpoint:
    """The last checkpoint before the run's failed (or cancelled) step; for a run whose
    steps all succeeded, its first checkpoint (the whole run again, a fork). Raises
    ``ControlError`` ``nothing_to_replay`` when the run has no checkpoint to start from."""
    candidates = replayable_checkpoints(run)
    if not candidates:
        raise ControlError("nothing_to_replay", "the run has no checkpoint to start from")
    failed = _first_unfinished(run)
    if failed is None:
        return candidates[-1]
    for cp in candidates:
        if _cut(cp) < failed.seq:
            return cp
    return candidates[-1]


def find_checkpoint(run: Run, name: str | None) -> Checkpoint:
    """The checkpoint ``name`` names (``after:think#7`` or the newest usable
    ``after:think``, as ``rewind.find_checkpoint``), or the default when ``name`` is
    empty. Raises ``ControlError``: ``unknown_checkpoint`` listing names that exist,
    ``nothing_to_replay`` for a checkpoint at the end of the run."""
    if not name:
        return default_checkpoint(run)
    cp = rewind.find_checkpoint(run, name)
    if cp.state.get("phase") is None:
        raise ControlError(
            "nothing_to_replay", f"{name} is the end of the run: nothing after it to replay"
        )
    return cp


def _later_steps(run: Run, cp: Checkpoint) -> QuerySet[Step]:
    """The original's steps after ``cp`` by seq, not superseded (a subquery: 10,000
    branches are counted, not loaded)."""
    return Step.objects.filter(run=run, seq__gt=_cut(cp)).exclude(status=StepStatus.SUPERSEDED)


def plan_replay(run: Run, checkpoint: str | None = None, *, reexecute: bool = False) -> ReplayPlan:
    """Preview replaying ``run`` from ``checkpoint`` (default: ``default_checkpoint``);
    changes nothing. Raises ``ControlError``: ``run_not_finished`` (only SUCCEEDED,
    FAILED or CANCELLED runs replay; resume a live one instead), ``unknown_checkpoint``,
    ``nothing_to_replay``, ``unknown_workflow_version``; ``invalid_input`` for a
    checkpoint name that breaks the identifier rule, before anything else."""
    if checkpoint is not None:
        check_identifier(checkpoint, "checkpoint")
    run.refresh_from_db()
    if not command_allows("replay", run.status):
        raise ControlError(
            "run_not_finished",
            f"run is {run.status}; only {command_states('replay')} runs replay "
            "(resume a live run instead)",
        )
    try:
        workflow = registry.get(run.workflow, run.workflow_version)
    except registry.UnknownWorkflow as exc:
        raise ControlError("unknown_workflow_version", str(exc)) from exc
    cp = find_checkpoint(run, checkpoint)
    later = _later_steps(run, cp)
    return ReplayPlan(
        original=run,
        checkpoint=cp,
        steps_to_run=workflow.path_from(cp.state["phase"]),
        steps_replaced=step_listing.listing(later),
        operations_reused=[] if reexecute else [reuse.describe(op) for op in reuse.reusable(later)],
        operations_may_repeat=[
            reuse.describe(op, with_result=False)
            for op in reuse.may_repeat(later, reexecute=reexecute)
        ],
        reexecute=reexecute,
        replays=[str(pk) for pk in run.replays.order_by("created_at").values_list("pk", flat=True)],
    )


def replay_run(
    run: Run,
    *,
    actor: str,
    reason: str,
    checkpoint: str | None = None,
    reexecute: bool = False,
    again: bool = False,
    start_after: float = 0.0,
) -> Run:
    """Replay the finished ``run`` as a new run (see the module docstring); returns it.

    ``reason`` is required; ``again`` allows a run that was replayed before;
    ``start_after`` delays the first step (seconds). Raises ``ControlError``:
    the codes of ``plan_replay``, ``reason_required``, ``already_replayed``.
    """
    require_reason(reason, "replay")
    reuse.check_choice(reexecute, reason)
    plan = plan_replay(run, checkpoint, reexecute=reexecute)
    cp = plan.checkpoint
    # The original's row lock serialises concurrent replays of it (two bulk replays, a
    # double click) and checks a client's precondition; it writes nothing to the
    # original (no event is queued on it).
    with run_transaction(run.pk) as locked:
        original = locked.run
        earlier = list(original.replays.values_list("pk", flat=True))
        if earlier and not again:
            raise ControlError(
                "already_replayed",
                f"run was already replayed as {earlier[-1]}",
                {"again": "pass again to replay it once more"},
            )
        used = cp.state.get("budget_used") or {}
        state = {**cp.state, "generation": 1, "replay_of": str(original.pk)}
        new = Run.objects.create(
            thread_id=original.thread_id,
            owner_id=original.owner_id,
            workflow=original.workflow,
            workflow_version=original.workflow_version,
            input=state.get("input", original.input),
            goal=original.goal,
            budget=original.budget,
            model_calls=used.get("model_calls", 0),
            tool_calls=used.get("tool_calls", 0),
            cost_usd=used.get("cost_usd", 0),
            replay_of=original,
            replay_checkpoint=cp.name,
            concurrency_key=original.concurrency_key,
            concurrency_limit=original.concurrency_limit,
        )
        reused = [] if reexecute else reuse.reusable(_later_steps(original, cp))
        with run_transaction(new.pk) as tx:
            tx.event(
                "run.created",
                {
                    "workflow": new.workflow,
                    "version": new.workflow_version,
                    "thread": original.thread.thread_id,
                },
                actor=actor,
            )
            tx.event(
                "run.replay_created",
                {
                    "original": str(original.pk),
                    "original_status": original.status,
                    "checkpoint": cp.name,
                    "checkpoint_generation": cp.generation,
                    "reason": reason,
                    "reexecute": reexecute,
                    "again": bool(earlier),
                    "steps_to_run": plan.steps_to_run,
                    "operations_reused": [op.idempotency_key for op in reused],
                    "operations_may_repeat": [
                        op["idempotency_key"] for op in plan.operations_may_repeat
                    ],
                    "start_after_s": start_after,
                },
                actor=actor,
            )
            checkpoints.store(new, None, cp.name, state)
            reuse.carry_over(reused, run_id=new.pk, generation=1)
            tx.schedule_step(cp.state["phase"], seq=1, actor=actor, delay=start_after)
    new.refresh_from_db()
    return new


# -- bulk ------------------------------------------------------------------------------


def replayed():
    """``Exists`` of a replay of the outer run (filter and annotation)."""
    return Exists(Run.objects.filter(replay_of=OuterRef("pk")))


def bulk_candidates(
    *,
    status: str | Collection[str] = RunStatus.FAILED,
    workflow: str | None = None,
    error_code: str | None = None,
    since: datetime | None = None,
    again: bool = False,
    queryset: QuerySet[Run] | None = None,
) -> QuerySet[Run]:
    """The finished runs a bulk replay takes, oldest first: in ``status`` (FAILED,
    CANCELLED or SUCCEEDED, or several of them), of ``workflow``, whose failing step (or
    the run) has ``error_code``, created at or after ``since``, not replayed already
    unless ``again``; within ``queryset`` when given (the console's current filter).
    Raises ``ControlError`` ``invalid_status`` for a status that is not terminal and
    ``unknown_workflow`` (listing the registered names) for a workflow that is not
    registered, rather than matching no run."""
    if workflow is not None:
        check_identifier(workflow, "workflow")
        try:
            registry.get(workflow)
        except registry.UnknownWorkflow as exc:
            raise ControlError("unknown_workflow", str(exc), {"workflow": "unknown"}) from exc
    statuses = {status} if isinstance(status, str) else set(status)
    if not statuses or not statuses <= RUN_TERMINAL:
        raise ControlError(
            "invalid_status",
            f"only finished runs replay; {', '.join(sorted(statuses - RUN_TERMINAL)) or 'no state'}"
            " is not SUCCEEDED, FAILED or CANCELLED",
            {"status": "one of SUCCEEDED, FAILED, CANCELLED"},
        )
    runs = (queryset if queryset is not None else Run.objects.all()).filter(
        status__in=sorted(statuses)
    )
    if workflow is not None:
        runs = runs.filter(workflow=workflow)
    if error_code is not None:
        check_text(error_code, "error_code", limit=MAX_CHARS["error_code"], identifier=True)
    if error_code:
        failing = Step.objects.filter(
            run=OuterRef("pk"), status=StepStatus.FAILED, error_code=error_code
        )
        runs = runs.filter(
            Exists(failing) | Exists(Run.objects.filter(pk=OuterRef("pk"), error_code=error_code))
        )
    if since is not None:
        # A time without an offset is UTC, as everywhere in the API and the CLI.
        runs = runs.filter(created_at__gte=since if since.tzinfo else since.replace(tzinfo=UTC))
    if not again:
        runs = runs.filter(~replayed())
    return runs.order_by("created_at", "pk")


@dataclass
class BulkResult:
    """Outcome of a bulk replay: ``created`` ``[(original id, replay id, start_after
    seconds)]``, ``skipped`` ``[(original id, code, message)]``, ``rate`` (replays per
    second) and ``dry_run``; ``plans`` holds the previews of a dry run."""

    rate: float
    dry_run: bool
    created: list[tuple[str, str, float]] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    plans: list[ReplayPlan] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON shape for the CLI and API."""
        return {
            "dry_run": self.dry_run,
            "rate": self.rate,
            "created": [
                {"run": o, "replay": r, "start_after_s": round(s, 3)} for o, r, s in self.created
            ],
            "skipped": [{"run": o, "code": c, "message": m} for o, c, m in self.skipped],
            "previews": [p.as_dict() for p in self.plans],
        }


def check_rate(rate) -> float:
    """``rate`` as a finite number of replays per second in (0, 1000]: a JSON number
    (an ``int`` or ``float``, never a bool or text; a text face turns what was typed
    into a number first, ``runs.engine.rules.number_from_text``). Raises
    ``ControlError`` ``invalid_rate`` otherwise."""
    if number_problem(rate, maximum=1000) is not None or rate <= 0:
        raise ControlError(
            "invalid_rate",
            "rate must be a number of replays per second in (0, 1000]",
            {"rate": "a number > 0 and <= 1000"},
        )
    return float(rate)


def bulk_replay(
    runs: QuerySet[Run],
    *,
    actor: str,
    reason: str,
    rate: float = DEFAULT_RATE,
    reexecute: bool = False,
    again: bool = False,
    dry_run: bool = False,
    limit: int = BULK_LIMIT,
    wait: Callable[[float], None] | None = None,
) -> BulkResult:
    """Replay each of ``runs`` (at most ``limit``) from the last checkpoint before its
    failed step so that replays start at most ``rate`` per second: the k-th (from 1)
    starts ``k / rate`` seconds from now. By default every replay is created at once,
    each with its first step due at its time (durable: the pacing holds if this process
    exits; a worker polling the database starts it then, an RQ worker when the sweeper
    re-notifies it, so within ``AGENTOPS_SWEEP_SECONDS``). With ``wait`` (``time.sleep``:
    the CLI) this call instead creates each replay due at once, ``1 / rate`` seconds after
    the previous one was created, so it takes at least ``n / rate`` seconds and every
    worker kind is notified on time.

    A run that cannot be replayed (changed, already replayed meanwhile, nothing to
    replay) is skipped with its code; the others go on. ``dry_run`` returns the previews
    and changes nothing. Raises ``ControlError`` ``reason_required`` / ``invalid_rate``
    before touching anything."""
    rate = check_rate(rate)
    require_reason(reason, "replay")
    reuse.check_choice(reexecute, reason)
    result = BulkResult(rate=rate, dry_run=dry_run)
    began = previous = time.monotonic()
    for run in list(runs[:limit]):
        try:
            if dry_run:
                result.plans.append(plan_replay(run, reexecute=reexecute))
                continue
            slot = (len(result.created) + 1) / rate
            if wait is not None:
                # A full interval after the previous replay was created, however late it
                # was: never two closer than 1 / rate, so no catch-up burst.
                wait(max(previous + 1 / rate - time.monotonic(), 0.0))
                slot = time.monotonic() - began
            new = replay_run(
                run,
                actor=actor,
                reason=reason,
                reexecute=reexecute,
                again=again,
                start_after=0.0 if wait is not None else slot,
            )
            previous = time.monotonic()
            result.created.append((str(run.pk), str(new.pk), slot))
        except ControlError as exc:
            result.skipped.append((str(run.pk), exc.code, exc.message))
    return result
