"""Resume from a named checkpoint.

A resume picks a checkpoint (``start`` or ``after:<step>``), optionally patches its
input, and continues from it in a NEW GENERATION of the run:

- every step after the checkpoint (by ``seq``, not already SUPERSEDED or CANCELLED)
  becomes SUPERSEDED: still visible, never executed or committed again (the executor
  and the fenced commit both refuse steps of an old generation);
- the run's generation is bumped and the checkpoint's state is copied into it (same
  name, new generation) with the patched input;
- messages of the run after the checkpoint's ``message_seq`` are marked superseded;
- artifacts are restored by reference: the new generation sees exactly the artifact ids
  of the checkpoint state (rows and files of superseded steps stay, unreferenced);
- budget usage is set back to the checkpoint's ``budget_used`` (the usage being
  discarded is recorded in the event);
- the phase (the checkpoint's next step) is scheduled; nothing before the checkpoint
  runs again.

Idempotency keys contain the generation (``runs.engine.effects.ledger``). By default the
operations the superseded steps recorded SUCCEEDED are carried over into the new
generation's keys (``runs.engine.control.reuse``), so a step that asks for the same
business action again gets the recorded result and the outside world is not called
twice; ``reexecute=True`` (with a reason, recorded on the event) gives them new keys
instead, so they happen again. The preview (``plan_resume``) lists each operation reused,
with its recorded result, and each one that may repeat.
"""

from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from runs.engine.control import reuse
from runs.engine.control.checkpoint_names import resumable_names, usable
from runs.engine.control.refusals import ControlError, require_reason
from runs.engine.control.step_listing import branch_groups, listing
from runs.engine.effects.budget import usage
from runs.engine.rules import check_identifier, check_object, value_problem
from runs.engine.state import checkpoints
from runs.engine.state.gateway import RunTx, run_transaction
from runs.engine.state.store import store
from runs.engine.state.store_interface import Resolution
from runs.models import Checkpoint, Message, Run, Step
from runs.states import (
    RUN_TERMINAL,
    STEP_SETTLED,
    RunStatus,
    StepStatus,
    command_allows,
    command_states,
)
from runs.workflows import registry


@dataclass
class ResumePlan:
    """What a resume from ``checkpoint`` would do.

    ``steps_to_rerun``: step names that will run again, in order (approvals assumed
    approved, no ``goto``). ``operations_reused``: side-effecting operations the
    superseded steps recorded SUCCEEDED, whose results the new generation reuses
    (``reuse.describe`` rows, with ``result``); empty when ``reexecute``.
    ``operations_may_repeat``: those that may happen again (no recorded result, or all
    when ``reexecute``). ``steps_to_supersede``: in seq order, ``{"name", "seq",
    "generation", "status", "error_code", "label"}`` per step, and one row with counts
    per map step's branches (there may be 10,000), as ``step_listing.listing``;
    ``label`` is the line people read (``work#3 (PENDING)``,
    ``work#4..8 (5 branches: SUCCEEDED 5)``). ``input``: the
    input the new generation will see.
    """

    checkpoint: Checkpoint
    steps_to_rerun: list[str]
    operations_may_repeat: list[dict[str, Any]]
    steps_to_supersede: list[dict[str, Any]] = field(default_factory=list)
    input: dict[str, Any] = field(default_factory=dict)
    operations_reused: list[dict[str, Any]] = field(default_factory=list)
    reexecute: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON shape for the CLI and API."""
        return {
            "checkpoint": {
                "name": self.checkpoint.name,
                "generation": self.checkpoint.generation,
                "id": self.checkpoint.pk,
            },
            "steps_to_rerun": self.steps_to_rerun,
            "reexecute": self.reexecute,
            "operations_reused": self.operations_reused,
            "operations_may_repeat": self.operations_may_repeat,
            "steps_to_supersede": self.steps_to_supersede,
            "input": self.input,
        }


def find_checkpoint(run: Run, name: str) -> Checkpoint:
    """The checkpoint ``name`` names: ``after:think#7`` the one saved by the step with
    seq 7, ``after:think`` the newest usable one of that name.
    ``ControlError("unknown_checkpoint")`` listing some names that exist otherwise."""
    query = Checkpoint.objects.filter(run=run, name=name)
    base, _, seq = name.rpartition("#")
    if base and seq.isdigit():
        query = query | Checkpoint.objects.filter(run=run, name=base, step__seq=int(seq))
    for cp in query.select_related("step").order_by("-pk"):
        if usable(cp):
            return cp
    names = resumable_names(run)[:20]
    raise ControlError(
        "unknown_checkpoint",
        f"run has no usable checkpoint {name!r}",
        {"checkpoint": "available: " + (", ".join(names) or "none")},
    )


def plan_resume(
    run: Run, checkpoint_name: str, input_patch: dict | None = None, *, reexecute: bool = False
) -> ResumePlan:
    """Preview a resume (changes nothing); ``reexecute`` previews re-executing the
    recorded side effects instead of reusing them. Raises ``ControlError``:
    ``run_terminal``, ``unknown_checkpoint``, ``nothing_to_resume`` (the checkpoint is the
    end of the run), ``invalid_input`` (patch not an object, holding a value no database
    stores such as a lone surrogate or NaN, or the patched input invalid),
    ``unknown_workflow_version``; ``invalid_input`` for a checkpoint name that breaks the
    identifier rule, before anything else."""
    check_identifier(checkpoint_name, "checkpoint")
    # A bad patch is refused before the run's state is read, as the CLI and the
    # console refuse it before they reach the engine.
    if input_patch is not None:
        check_object(input_patch, "input_patch")
    run.refresh_from_db()
    if run.status in RUN_TERMINAL:
        raise ControlError("run_terminal", f"run is {run.status}; terminal runs do not resume")
    found = value_problem(input_patch)
    if found is not None:
        path, type_name, reason = found
        raise ControlError(
            "invalid_input",
            f"input patch cannot be stored: at {path}, {reason}",
            {"input_patch" + path[1:]: f"{reason} ({type_name})"},
        )
    try:
        workflow = registry.get(run.workflow, run.workflow_version)
    except registry.UnknownWorkflow as exc:
        raise ControlError("unknown_workflow_version", str(exc)) from exc
    cp = find_checkpoint(run, checkpoint_name)
    phase = cp.state.get("phase")
    if phase is None:
        raise ControlError("nothing_to_resume", f"{checkpoint_name} is the end of the run")
    new_input = {**cp.state.get("input", run.input), **(input_patch or {})}
    errors = workflow.validate_input(new_input)
    if errors:
        raise ControlError(
            "invalid_input",
            "patched input is not valid",
            {f"input.{k}": v for k, v in errors.items()},
        )
    later = _later_steps(run, cp)
    return ResumePlan(
        checkpoint=cp,
        steps_to_rerun=workflow.path_from(phase),
        operations_reused=[] if reexecute else [reuse.describe(op) for op in reuse.reusable(later)],
        operations_may_repeat=[
            reuse.describe(op, with_result=False)
            for op in reuse.may_repeat(later, reexecute=reexecute)
        ],
        steps_to_supersede=listing(later),
        input=new_input,
        reexecute=reexecute,
    )


def _later_steps(run: Run, cp: Checkpoint) -> QuerySet[Step]:
    """The steps a resume from ``cp`` supersedes: after it by seq, not settled yet."""
    cut = cp.step.seq if cp.step else 0
    return Step.objects.filter(run_id=run.pk, seq__gt=cut).exclude(status__in=STEP_SETTLED)


def resume_from_checkpoint(
    run: Run,
    checkpoint_name: str,
    *,
    actor: str,
    input_patch: dict | None = None,
    reason: str = "",
    takeover=None,
    note: dict | None = None,
    reexecute: bool = False,
) -> Run:
    """Resume ``run`` from ``checkpoint_name`` (see the module docstring); returns the run.

    The superseded steps' SUCCEEDED side effects are reused unless ``reexecute`` (which
    needs a ``reason``: ``ControlError`` ``reason_required``).

    Allowed while the run is PENDING, RUNNING, WAITING_APPROVAL, WAITING_EXTERNAL or
    PAUSED. While steps run (a fan-out's branches), it pauses first: the resume is
    recorded with a pause request (``run.pause_requested`` with ``resume``; the returned
    run is still RUNNING), the running steps stop at their next safe point or finish
    and save, so every effect they made is recorded and reused, and once none runs the
    resume is made (``lifecycle.settle_pause``). An open takeover is resolved with
    action ``resume`` (``takeover``/``note`` let ``resolve_takeover`` pass its own).
    Raises ``ControlError`` (the codes of ``plan_resume`` and ``reason_required``,
    ``not_allowed_in_state``).
    """
    require_reason(reason, "resume")
    reuse.check_choice(reexecute, reason)
    plan = plan_resume(run, checkpoint_name, input_patch, reexecute=reexecute)
    with run_transaction(run.pk) as tx:
        status = tx.run.status
        if not command_allows("resume_from_checkpoint", status):
            raise ControlError(
                "not_allowed_in_state",
                f"run is {status}; resume from a checkpoint applies to "
                f"{command_states('resume_from_checkpoint')} runs",
            )
        running = Step.objects.filter(run_id=run.pk, status=StepStatus.RUNNING).count()
        if running:
            # Superseding a step under its worker could repeat an effect it is making:
            # the steps stop (or finish and save) first, then the resume is made.
            resume = {
                "checkpoint": checkpoint_name,
                "input_patch": input_patch,
                "reexecute": reexecute,
            }
            tx.request_pause(
                {"reason": reason, "actor": actor, "resume": resume}, actor=actor, running=running
            )
        else:
            _restart_from(
                tx,
                plan,
                actor=actor,
                reason=reason,
                input_patch=input_patch,
                takeover=takeover,
                note=note,
            )
    run.refresh_from_db()
    return run


def _restart_from(
    tx: RunTx,
    plan: ResumePlan,
    *,
    actor: str,
    reason: str,
    input_patch: dict | None,
    takeover,
    note: dict | None,
) -> None:
    """The resume itself, under ``tx``'s lock, with no step running."""
    cp, run, reexecute, status = plan.checkpoint, tx.run, plan.reexecute, tx.run.status
    generation = tx.run.generation + 1
    later = _later_steps(tx.run, cp)
    reused = [] if reexecute else reuse.reusable(later)
    superseded = 0
    for step_id, step_status in (
        later.filter(branch_of__isnull=True).order_by("seq").values_list("pk", "status")
    ):
        superseded += tx.transition_step(
            step_id,
            StepStatus.SUPERSEDED,
            expected=step_status,
            actor=actor,
            event_type="step.superseded",
            payload={"by_generation": generation, "checkpoint": cp.name},
            owner="",
            lease_until=None,
        )
    # A map step's branches (up to 10,000) go in one UPDATE per map step.
    for group in branch_groups(later):
        superseded += tx.supersede_branches(
            group["branch_of_id"],
            actor=actor,
            first_seq=group["first_seq"],
            last_seq=group["last_seq"],
            by_generation=generation,
            checkpoint=cp.name,
        )
    tx.cancel_pending_approvals(
        actor=actor,
        reason=f"resume from {cp.name}",
        comment=f"superseded by a resume from {cp.name}",
        step_ids=Step.objects.filter(run_id=run.pk, seq__gt=cp.step.seq if cp.step else 0).values(
            "pk"
        ),
    )
    message_seq = cp.state.get("message_seq", 0)
    messages = (
        Message.objects.filter(run_id=run.pk, seq__gt=message_seq)
        .exclude(status=Message.Status.SUPERSEDED)
        .update(status=Message.Status.SUPERSEDED)
    )
    budget_before = usage(tx.run)
    used = cp.state.get("budget_used") or budget_before
    tx.start_generation(
        current_step=None,
        model_calls=used["model_calls"],
        tool_calls=used["tool_calls"],
        cost_usd=used["cost_usd"],
        tokens=used.get("tokens", tx.run.tokens),
        unpriced_model_calls=used.get("unpriced_model_calls", tx.run.unpriced_model_calls),
    )
    state = {**cp.state, "input": plan.input, "generation": generation}
    checkpoints.store(tx.run, cp.step, cp.name, state, base_id=cp.pk, previous=cp.state)
    reuse.carry_over(reused, run_id=run.pk, generation=generation)
    tx.event(
        "run.resumed_from_checkpoint",
        {
            "checkpoint": cp.name,
            "generation": generation,
            "input_patch": input_patch or {},
            "reason": reason,
            "reexecute": reexecute,
            "operations_reused": [op.idempotency_key for op in reused],
            "operations_may_repeat": [op["idempotency_key"] for op in plan.operations_may_repeat],
            "steps_to_rerun": plan.steps_to_rerun,
            "superseded_steps": superseded,
            "superseded_messages": messages,
            "budget_before": budget_before,
            "budget_restored": used,
        },
        actor=actor,
    )
    note = note or {"action": "resume", "reason": reason, "evidence": "", "checkpoint": cp.name}
    store().resolve(tx, Resolution(actor, note, takeover))
    if status in (RunStatus.PAUSED, RunStatus.WAITING_APPROVAL, RunStatus.WAITING_EXTERNAL):
        tx.transition_run(RunStatus.RUNNING, actor=actor, reason=reason or f"resume from {cp.name}")
    tx.schedule_step(cp.state["phase"], actor=actor)
