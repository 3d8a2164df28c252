"""Starting, inspecting and resuming runs: the functions behind the CLI, the console
and the API (views and commands stay thin and call these)."""

import json
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db.models.functions import Now

from runs.engine.control.branches import branch_counts
from runs.engine.control.refusals import ControlError, require_reason
from runs.engine.control.takeovers import open_takeover
from runs.engine.effects.budget import limit_errors, set_limits
from runs.engine.effects.budget import shown_usage as budget_usage
from runs.engine.effects.unknown_outcomes import resolve_unknown
from runs.engine.execution import dispatch, liveness
from runs.engine.rules import check_identifier, text_problem, value_problem
from runs.engine.state import leases
from runs.engine.state.clock import db_now
from runs.engine.state.gateway import RunTx, record_event, run_transaction
from runs.engine.state.store import store
from runs.engine.state.store_interface import NewRun, Resolution
from runs.models import Message, Run, Step, Takeover
from runs.states import (
    RUN_TERMINAL,
    STEP_OPEN,
    STEP_RETRYABLE,
    RunStatus,
    StepStatus,
    command_allows,
    command_states,
)
from runs.workflows import registry


def start_run(
    workflow: str,
    *,
    thread_id: str,
    input: Any,
    owner=None,
    budget: dict | None = None,
    request_id: str | None = None,
    faults: dict | None = None,
    version: int | None = None,
    actor: str = "cli",
    parent_step: Step | None = None,
    child_position: int | None = None,
    detached: bool = False,
) -> Run:
    """Create a run of ``workflow`` (latest version unless ``version``) on the thread
    ``thread_id``, with its first user message, ``start`` checkpoint and first step,
    all in one transaction (``Store.create_run``); the first step is notified after
    commit. ``parent_step``, ``child_position`` and ``detached`` make it a child run of
    that step's run (``runs.engine.control.children`` starts those). With a
    ``request_id`` the run ``owner`` already created with it is returned instead.

    Raises ``ControlError`` (``unknown_workflow``, ``invalid_input``, ``invalid_thread``,
    ``invalid_budget``).
    """
    return create_run(
        workflow,
        thread_id=thread_id,
        input=input,
        owner=owner,
        budget=budget,
        request_id=request_id,
        faults=faults,
        version=version,
        actor=actor,
        parent_step=parent_step,
        child_position=child_position,
        detached=detached,
    )[0]


def create_run(
    workflow: str,
    *,
    thread_id: str,
    input: Any,
    owner=None,
    budget: dict | None = None,
    request_id: str | None = None,
    request_fingerprint: str = "",
    faults: dict | None = None,
    version: int | None = None,
    actor: str = "cli",
    parent_step: Step | None = None,
    child_position: int | None = None,
    detached: bool = False,
) -> tuple[Run, bool]:
    """``start_run`` that also says whether it created the run: ``(run, created)``;
    ``created`` is ``False`` when ``owner`` already has a run with ``request_id`` (then
    nothing is written; ``request_fingerprint``, stored with a new run, names the
    request). Raises what ``start_run`` raises."""
    check_identifier(workflow, "workflow")
    if request_id is not None:
        check_identifier(request_id, "request_id")
    try:
        wf = registry.get(workflow, version)
    except registry.UnknownWorkflow as exc:
        raise ControlError("unknown_workflow", str(exc), {"workflow": "unknown"}) from exc
    check_thread_id(thread_id)
    # What no database stores (NaN and Infinity: Python's JSON reader accepts them) is
    # named before the workflow's schema, which would misname it ("must be from 0 to 60").
    if (found := value_problem(input)) is not None:
        path, type_name, reason = found
        errors = {
            path[2:] if path.startswith("$.") else path[1:] or "input": f"{reason} ({type_name})"
        }
    else:
        errors = wf.validate_input(input)
    concurrency = None if errors else wf.concurrency_of(input)
    if concurrency is None and not errors:
        path = wf.concurrency_key if isinstance(wf.concurrency_key, str) else "input"
        errors = {
            path: "must give the concurrency key "
            "(non-empty text of at most 200 characters, or an integer)"
        }
    if errors:
        raise ControlError(
            "invalid_input",
            "input is not valid for " + wf.name,
            {f"input.{k}" if k != "input" else k: v for k, v in errors.items()},
        )
    budget_errors = validate_budget(budget)
    if budget_errors:
        raise ControlError("invalid_budget", "budget is not valid", budget_errors)
    goal = str(input.get(wf.message_field, "")) if wf.message_field else None
    return store().create_run(
        NewRun(
            workflow=wf.name,
            version=wf.version,
            first_step=wf.first_step,
            thread_id=thread_id,
            input=input,
            actor=actor,
            owner=owner,
            goal=goal,
            budget=set_limits(budget),
            faults=faults or {},
            request_id=request_id or "",
            request_fingerprint=request_fingerprint,
            concurrency_key=concurrency[0] if concurrency else "",
            concurrency_limit=concurrency[1] if concurrency else None,
            parent_step=parent_step,
            child_position=child_position,
            detached=detached,
        )
    )


#: Extra keys of ``run_status``: ``{key: (fn(run) -> JSON | None, fn(value) -> str)}``,
#: registered by the apps that know the outside world (the lab adds its simulated
#: devices' calls and readings to its own runs), so the engine imports none of them.
STATUS_EXTRAS: dict[str, tuple[Callable[[Run], Any], Callable[[Any], str]]] = {}


def register_status_extra(
    key: str, extra: Callable[[Run], Any], line: Callable[[Any], str] | None = None
) -> None:
    """Add ``key: extra(run)`` (any JSON value) to the ``run_status`` document of each run
    for which ``extra`` returns something other than ``None``; ``line(value)`` is the
    one line ``runs status`` prints for it (default ``"<key>: <value as JSON>"``).
    Raises ``ValueError`` when ``key`` is already registered."""
    if key in STATUS_EXTRAS:
        raise ValueError(f"status extra {key!r} is already registered")
    STATUS_EXTRAS[key] = (extra, line or (lambda value: f"{key}: {json.dumps(value)}"))


def status_extras(run: Run) -> dict[str, Any]:
    """``{key: value}`` of the registered status extras that apply to ``run``."""
    found = {key: extra(run) for key, (extra, _) in STATUS_EXTRAS.items()}
    return {key: value for key, value in found.items() if value is not None}


def status_extra_lines(status: dict[str, Any]) -> list[str]:
    """The lines ``runs status`` prints for the extras a ``run_status`` document
    carries, in registration order (none when no app registered any)."""
    return [line(status[key]) for key, (_, line) in STATUS_EXTRAS.items() if key in status]


def text_refusal(value: Any, *, limit: int | None = None, identifier: bool = False) -> str | None:
    """Why ``value`` cannot be taken as a stored text (thread id, message, key): blank,
    or what the text rule (``runs.engine.rules.text_problem``, for an ``identifier`` when
    asked) finds; ``None`` when it can."""
    if not isinstance(value, str) or not value.strip():
        return "must be non-empty text"
    return text_problem(value, limit=limit, identifier=identifier)


def check_thread_id(thread_id: Any) -> None:
    """Raises ``InputRefused`` ``invalid_thread`` unless ``thread_id`` is 1..200
    characters a database stores as sent (``runs.engine.rules.check_identifier``)."""
    check_identifier(thread_id, "thread_id")


def validate_budget(budget) -> dict[str, str]:
    """Field errors of a budget limits dict (empty when valid); ``None`` means no limits.
    See ``runs.engine.effects.budget.limit_errors`` (the one budget check of every
    channel)."""
    return limit_errors(budget)


def latest_run(thread_id: str, owner=None) -> Run:
    """The newest run on the thread; raises ``ControlError`` ``unknown_thread``."""
    run = (
        Run.objects.filter(thread__thread_id=thread_id, thread__owner=owner)
        .order_by("-created_at")
        .first()
    )
    if run is None:
        raise ControlError("unknown_thread", f"no run on thread {thread_id!r}")
    return run


def open_step(run: Run) -> Step | None:
    """The current generation's step that is not finished yet, if any."""
    return (
        Step.objects.filter(run=run, generation=run.generation, status__in=STEP_OPEN)
        .order_by("seq")
        .first()
    )


def waiting_on(run: Run, step: Step | None) -> dict[str, Any] | None:
    """What the run waits for with no worker holding it, from its open ``step``:
    ``{"for": "signal", "signal": name, "until": datetime | None}`` (a signal wait and
    its deadline), ``{"for": "children", "open": int, "total": int, "until": None}``
    (a step waiting for its child runs) or ``{"for": "timer", "until": datetime}`` (a
    step held back by a durable timer); ``None`` otherwise."""
    if step is None or run.status in RUN_TERMINAL:
        return None
    if step.status == StepStatus.WAITING and step.signal_name:
        return {"for": "signal", "signal": step.signal_name, "until": step.wait_until}
    if step.status == StepStatus.WAITING and run.status == RunStatus.WAITING_EXTERNAL:
        children = Run.objects.filter(parent_step_id=step.pk, detached=False)
        total = children.count()
        if total:
            open_ = children.exclude(status__in=RUN_TERMINAL).count()
            return {"for": "children", "open": open_, "total": total, "until": None}
    if step.status == StepStatus.PENDING and step.attempt == 0 and step.not_before > db_now():
        return {"for": "timer", "until": step.not_before}
    return None


def _as_json(waiting: dict[str, Any] | None) -> dict[str, Any] | None:
    if waiting is None:
        return None
    return {**waiting, "until": waiting["until"].isoformat() if waiting["until"] else None}


def run_status(run: Run) -> dict[str, Any]:
    """The status document printed by ``runs status --json``:
    ``{run_id, thread, workflow, version, status, generation, next_step, waiting_on
    (see ``waiting_on``), steps: [{name,
    status, attempt, generation, error_code, error_detail, output}] (``output``: the
    step's JSON output, ``None`` until it has one; ``error_code``/``error_detail``: its
    last attempt's error, untrusted text, ``None`` when there is none; a map step's
    branches not listed but counted on it: ``branches: {status: n}``), result (a
    SUCCEEDED run's result: the output of the step that finished it, else ``None``),
    messages: [{id, role, content, tool_calls, tool_call_id}], budget: {...},
    error_code, error_detail (why the run failed, ``None`` otherwise),
    takeover: {...} | None, compensation: {status, reason, steps,
    manual_review}, replay_of: {run, checkpoint} | None, replays: [run ids], parent,
    children (see ``family``), pause_progress (``pause_progress``, ``None`` when no pause
    is requested)}`` plus what
    the registered extras that apply to the run add (``status_extras``; the lab's runs:
    ``calls: {device.op: count}, devices: {...}``)."""
    run.refresh_from_db()
    nxt = open_step(run)
    # A map step's branches are counted on it, not listed: there may be 10,000.
    branches = branch_counts(run.pk)
    steps = [
        {
            "name": s.name,
            "status": s.status,
            "attempt": s.attempt,
            "generation": s.generation,
            "error_code": s.error_code or None,
            "error_detail": s.error_detail or None,
            "output": s.output,
            **({"branches": branches[s.pk]} if s.pk in branches else {}),
        }
        for s in Step.objects.filter(run=run, branch_of__isnull=True).order_by("seq")
    ]
    result = None
    if run.status == RunStatus.SUCCEEDED:
        # The step that finished the run: its current generation's last succeeded step.
        last = (
            Step.objects.filter(run=run, generation=run.generation, status=StepStatus.SUCCEEDED)
            .order_by("-seq")
            .only("output")
            .first()
        )
        result = last.output if last is not None else None
    messages = [
        m.as_dict()
        for m in Message.objects.filter(
            thread_id=run.thread_id, status=Message.Status.FINAL
        ).order_by("seq")
    ]
    doc = {
        "run_id": str(run.pk),
        "thread": run.thread.thread_id,
        "workflow": run.workflow,
        "version": run.workflow_version,
        "status": run.status,
        "generation": run.generation,
        "next_step": nxt.name if nxt and run.status not in RUN_TERMINAL else None,
        "waiting_on": _as_json(waiting_on(run, nxt)),
        "replay_of": (
            {"run": str(run.replay_of_id), "checkpoint": run.replay_checkpoint}
            if run.replay_of_id
            else None
        ),
        "replays": [
            str(pk) for pk in run.replays.order_by("created_at").values_list("pk", flat=True)
        ],
        **family(run),
        # Counted from the rows listed here, so the document never contradicts itself.
        "pause_progress": pause_progress(
            run,
            running=sum(
                (s["status"] == StepStatus.RUNNING) + s.get("branches", {}).get("RUNNING", 0)
                for s in steps
            ),
        )
        or None,
        "steps": steps,
        "result": result,
        "messages": messages,
        **status_extras(run),
        "budget": {"limits": run.budget, "used": budget_usage(run)},
        "error_code": run.error_code or None,
        "error_detail": run.error_detail or None,
        "takeover": _open_takeover(run),
        "compensation": {"status": run.compensation_status or None, **(run.compensation or {})},
    }
    return doc


def family(run: Run) -> dict[str, Any]:
    """``{"parent": {run, step, position, detached} | None, "children": {"total": int,
    "open": int}}``: the run whose step started ``run``, and the child runs it
    started."""
    parent = None
    if run.parent_run_id is not None:
        step_name = Step.objects.filter(child_runs=run).values_list("name", flat=True).first()
        parent = {
            "run": str(run.parent_run_id),
            "step": step_name,
            "position": run.child_position,
            "detached": run.detached,
        }
    children = Run.objects.filter(parent_run_id=run.pk)
    total = children.count()
    open_ = children.exclude(status__in=RUN_TERMINAL).count() if total else 0
    return {"parent": parent, "children": {"total": total, "open": open_}}


def _open_takeover(run: Run) -> dict[str, Any] | None:
    """The run's open takeover as ``{id, cause, reason, step, suggested_action}``."""
    t = Takeover.objects.filter(run=run, status=Takeover.Status.OPEN).select_related("step").first()
    if t is None:
        return None
    return {
        "id": t.pk,
        "cause": t.cause,
        "reason": t.reason,
        "step": t.step.name if t.step else None,
        "suggested_action": t.suggested_action,
    }


def redispatch(run: Run, *, actor: str, wait_seconds: float | None = None, on_wait=None) -> Step:
    """Re-dispatch the run's next step.

    A step whose owner liveness knows to be dead (``runs.engine.execution.liveness``) is
    handed back at once with the same fenced move (``lease.owner_dead``). A step whose
    lease is still live elsewhere is never taken: this waits (up to ``wait_seconds``,
    default lease length + 5 s) for the lease to expire, then reclaims it through the
    same fenced UPDATE the sweeper uses. ``on_wait(step, seconds_left)`` is
    called before waiting. Returns the step notified. Raises ``ControlError``
    (``run_terminal``, ``run_paused``, ``not_allowed_in_state``, ``nothing_to_resume``,
    ``lease_live``).
    """
    run.refresh_from_db()
    if run.status in RUN_TERMINAL:
        raise ControlError("run_terminal", f"run is {run.status}; nothing to resume")
    if run.status == RunStatus.PAUSED:
        raise ControlError(
            "run_paused",
            "run is PAUSED for a takeover: resolve it, or resume from a checkpoint with --from",
        )
    if not command_allows("redispatch", run.status):
        raise ControlError(
            "not_allowed_in_state",
            f"run is {run.status}; re-dispatch applies to {command_states('redispatch')} runs",
        )
    step = open_step(run)
    if step is None:
        raise ControlError("nothing_to_resume", "the run has no open step")
    if step.status == StepStatus.RUNNING:
        deadline = time.monotonic() + (
            wait_seconds if wait_seconds is not None else settings.AGENTOPS_LEASE_SECONDS + 5
        )
        while True:
            step.refresh_from_db()
            if step.status != StepStatus.RUNNING:
                break
            left = (step.lease_until - db_now()).total_seconds() if step.lease_until else 0
            if left < 0:
                with run_transaction(run.pk) as tx:
                    leases.release_expired_lease(tx, step.pk, step.attempt, step.owner, actor=actor)
                continue
            if liveness.release_dead_owners(actor, 1, step_id=step.pk):
                continue
            if time.monotonic() + min(left, 0.5) > deadline:
                raise ControlError(
                    "lease_live",
                    f"step {step.name} is leased by {step.owner} "
                    f"for {left:.1f}s more; not taking it",
                )
            if on_wait:
                on_wait(step, left)
            time.sleep(min(max(left, 0.05), 0.5))
    with run_transaction(run.pk) as tx:
        tx.event(
            "run.resume_requested",
            {"step": step.name, "attempt": step.attempt},
            step_id=step.pk,
            actor=actor,
        )
        Step.objects.filter(pk=step.pk).update(notified_at=Now())
        dispatch.notify_on_commit(run.pk, step.pk, step.attempt)
    step.refresh_from_db()
    return step


def retry_step(
    run: Run,
    *,
    actor: str,
    reason: str,
    takeover=None,
    note: dict | None = None,
    against_verify: bool = False,
) -> Step:
    """Re-queue the failed (or unknown-outcome) step of a PAUSED run: a new PENDING row
    of the same step in the same generation, so the failed attempts stay visible and the
    idempotency keys stay the same (a retried action that already succeeded at the
    outside system is reused, not repeated). The run goes RUNNING; its open takeover is resolved
    (action ``retry``). Returns the new step. Raises ``ControlError``
    (``not_allowed_in_state``, ``nothing_to_retry``). An UNKNOWN step is handed to
    ``unknown.resolve_unknown`` with outcome ``not-done`` instead (the ledger row and the
    step are requeued), with ``reason`` as the evidence; after the verify hook answered
    ``done`` that goes against it, refused (``contradicts_verify``) unless
    ``against_verify``. A blank ``reason`` is refused (``reason_required``).
    """
    require_reason(reason, "retry")
    with run_transaction(run.pk) as tx:
        if not command_allows("retry", tx.run.status):
            raise ControlError(
                "not_allowed_in_state",
                f"run is {tx.run.status}; retry applies to {command_states('retry')} runs",
            )
        failed = (
            Step.objects.filter(
                run_id=run.pk,
                generation=tx.run.generation,
                status__in=STEP_RETRYABLE,
            )
            .order_by("-seq")
            .first()
        )
        if failed is None:
            raise ControlError("nothing_to_retry", "the run has no failed or unknown step")
    if failed.status == StepStatus.UNKNOWN:
        # Retrying an unknown outcome is the operator's "it did not happen".
        resolve_unknown(
            run,
            failed.name,
            outcome="not-done",
            evidence=reason,
            actor=actor,
            against_verify=against_verify,
        )
        if note:
            record_event(
                run.pk,
                "takeover.resolved",
                {**note, "takeover_id": getattr(takeover, "pk", None)},
                step_id=failed.pk,
                actor=actor,
            )
        return Step.objects.get(pk=failed.pk)
    with run_transaction(run.pk) as tx:
        if tx.run.status != RunStatus.PAUSED or tx.run.generation != failed.generation:
            raise ControlError("run_changed", "the run changed meanwhile; look again")
        note = note or {"action": "retry", "reason": reason, "evidence": ""}
        store().resolve(tx, Resolution(actor, note, takeover))
        tx.transition_run(RunStatus.RUNNING, actor=actor, reason=reason)
        tx.event(
            "step.retry_requested",
            {"step": failed.name, "reason": reason, "failed_step_id": failed.pk},
            step_id=failed.pk,
            actor=actor,
        )
        step_id = tx.schedule_step(failed.name, actor=actor)
    return Step.objects.get(pk=step_id)


#: What operators see while a requested pause waits for running steps.
PAUSE_WAITING_MESSAGE = "pause requested, waiting for the running steps"


def pause_run(run: Run, *, actor: str, reason: str) -> Run:
    """An operator pauses ``run`` for a human look: PAUSED with an ``operator_request``
    takeover (resolve it to continue, e.g. ``resume``). Allowed in the states of
    ``RUN_COMMANDS["pause"]``. While steps run (a fan-out's branches, or any step) the
    pause is requested instead (``run.pause_requested``; asking again is a no-op): no
    step of the run is claimed, each running step stops at its next safe point (given
    back, uncounted) or finishes and saves, and once none runs the run is PAUSED
    (``settle_pause``; a dead worker's steps count once liveness or their lease frees
    them). A paused approval cannot be decided until the takeover is resolved with
    ``resume``, which puts the run back to waiting. Returns the run as it is afterwards.
    Raises ``ControlError`` (``reason_required``, ``run_terminal``,
    ``not_allowed_in_state``).
    """
    require_reason(reason, "pause")
    with run_transaction(run.pk) as tx:
        status = tx.run.status
        if status in RUN_TERMINAL:
            raise ControlError("run_terminal", f"run is {status}")
        if not command_allows("pause", status):
            raise ControlError(
                "not_allowed_in_state",
                f"run is {status}; pause applies to {command_states('pause')} runs",
            )
        if tx.run.pause_requested_at is None:
            running = Step.objects.filter(run_id=run.pk, status=StepStatus.RUNNING).count()
            if running:
                tx.request_pause({"reason": reason, "actor": actor}, actor=actor, running=running)
            else:
                _pause_now(tx, reason=reason, actor=actor)
    run.refresh_from_db()
    return run


def pause_progress(run: Run, *, running: int | None = None) -> str:
    """One line for people: where a requested pause of ``run`` stands, or ``""`` when
    none is requested. ``running``: how many of its steps run, when the caller has
    just read them (counted here otherwise)."""
    if run.pause_requested_at is None or run.status in RUN_TERMINAL:
        return ""
    if running is None:
        running = Step.objects.filter(run_id=run.pk, status=StepStatus.RUNNING).count()
    return f"{PAUSE_WAITING_MESSAGE} ({running} running)"


def settle_pause(run_id, *, actor: str) -> bool:
    """Carry out the pause requested on run ``run_id`` once no step runs: steps whose
    lease ran out are given back (fenced, ``lease.expired``), then the run is PAUSED
    with its ``operator_request`` takeover, or resumed from the checkpoint a resume
    asked for (``rewind.resume_from_checkpoint``, as its requester; when the run changed
    so that it is refused, the run is PAUSED with the refusal as the reason). Safe to
    call from anywhere at any time (the worker whose step ended, the sweeper). Returns
    ``True`` when the request was carried out; ``False`` while steps run or when none is
    requested (a cancel overtakes it)."""
    with run_transaction(run_id) as tx:
        if tx.run.pause_requested_at is None:
            return False
        resume = (tx.run.pause_request or {}).get("resume")
        command = "resume_from_checkpoint" if resume else "pause"
        if tx.run.status in RUN_TERMINAL or not command_allows(command, tx.run.status):
            tx.clear_pause_request()
            return False
        running = list(
            Step.objects.filter(run_id=run_id, status=StepStatus.RUNNING).values_list(
                "pk", "attempt", "owner", "lease_until"
            )
        )
        now = db_now()
        if any(lease_until is not None and lease_until >= now for *_, lease_until in running):
            return False
        for step_id, attempt, owner, _ in running:
            leases.release_expired_lease(tx, step_id, attempt, owner, actor=actor)
        request = tx.clear_pause_request()
        if not resume:
            _pause_now(tx, reason=request.get("reason", ""), actor=request.get("actor", actor))
            return True
    _resume_requested(run_id, request, resume)
    return True


def _resume_requested(run_id, request: dict[str, Any], resume: dict[str, Any]) -> None:
    """The resume from a checkpoint a pause request carried, now that no step runs."""
    from runs.engine.control.rewind import resume_from_checkpoint

    requester = request.get("actor", "")
    try:
        resume_from_checkpoint(
            Run.objects.get(pk=run_id),
            resume["checkpoint"],
            actor=requester,
            input_patch=resume.get("input_patch"),
            reason=request.get("reason", ""),
            reexecute=bool(resume.get("reexecute")),
        )
    except ControlError as exc:
        with run_transaction(run_id) as tx:
            if tx.run.status not in RUN_TERMINAL and command_allows("pause", tx.run.status):
                _pause_now(
                    tx,
                    reason=f"resume from {resume['checkpoint']} refused: {exc.message}",
                    actor=requester,
                )


def settle_requested_pauses(actor: str, batch: int) -> int:
    """Sweeper task: carry out requested pauses whose running steps' worker died (their
    lease expired, or liveness gave them back) or whose last worker died before it did.
    Returns how many runs were paused."""
    ids = list(
        Run.objects.filter(pause_requested_at__isnull=False)
        .order_by("pause_requested_at")
        .values_list("pk", flat=True)[:batch]
    )
    return sum(1 for run_id in ids if settle_pause(run_id, actor=actor))


def _pause_now(tx: RunTx, *, reason: str, actor: str) -> None:
    """PAUSED with an ``operator_request`` takeover, under ``tx``'s lock."""

    step = (
        Step.objects.filter(
            run_id=tx.run.pk, generation=tx.run.generation, status=StepStatus.PENDING
        )
        .order_by("seq")
        .first()
    )
    open_takeover(
        tx,
        cause="operator_request",
        reason=reason,
        actor=actor,
        step=step,
        suggested_action="Resolve with resume to continue, or cancel.",
        evidence={"requested_by": actor},
    )
