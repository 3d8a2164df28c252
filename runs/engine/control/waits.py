"""Runs that wait for a named signal: the wait, a delivery, a kept signal, a timeout.

A signal step ends its attempt by waiting (``commit_signal_wait``): the step goes
WAITING with its lease released and the run WAITING_EXTERNAL, so no worker holds
anything. ``deliver_signal`` stores a signal (one row per run, name and request id, so a
repeated delivery is the first one again) and, when the run waits for that name, ends
the waiting step with the payload as its output and continues the run, in one
transaction. A signal that comes first is kept and taken by the wait when it starts.
A wait's deadline is checked by the delivery that meets it and by the sweeper for waits
nobody touched (``expire_signal_waits``).
"""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models.functions import Now
from jsonschema_rs import Draft202012Validator

from runs.engine.errors import ControlError
from runs.engine.rules import check_identifier, value_problem
from runs.engine.state.clock import db_now, deadline_in
from runs.engine.state.gateway import RunTx, run_transaction
from runs.models import Signal, Step
from runs.states import RUN_TERMINAL, RunStatus, StepStatus
from runs.workflows import registry
from runs.workflows.definition import StepDef, Workflow


@dataclass(frozen=True)
class Delivery:
    """What ``deliver_signal`` did: the stored ``signal``; ``consumed`` when a waiting
    step took it (now or at its first delivery); ``duplicate`` when this request id had
    delivered it before (nothing changed this time)."""

    signal: Signal
    consumed: bool
    duplicate: bool

    def as_dict(self) -> dict[str, Any]:
        """``{signal, request_id, run_id, consumed, duplicate, step}`` for answers."""
        return {
            "signal": self.signal.name,
            "request_id": self.signal.request_id,
            "run_id": str(self.signal.run_id),
            "consumed": self.consumed,
            "duplicate": self.duplicate,
            "step": self.signal.step_id,
        }


def payload_errors(schema: dict | None, payload: Any) -> dict[str, str]:
    """Field errors of ``payload`` against the JSON Schema ``schema`` as
    ``{"payload.<path>": message}`` (empty when valid or when there is no schema)."""
    problem = value_problem(payload)
    if problem is not None:
        path, type_name, reason = problem
        return {"payload" + path[1:]: f"{reason} ({type_name})"}
    if schema is None:
        return {}
    errors: dict[str, str] = {}
    for error in Draft202012Validator(schema).iter_errors(payload):
        path = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in error.instance_path)
        errors.setdefault(f"payload{path}", error.message)
    return errors


def waiting_step(run_id, generation: int, name: str | None = None) -> Step | None:
    """The run's step that waits for a signal (``name``: for that one), if any."""
    query = Step.objects.filter(
        run_id=run_id, generation=generation, status=StepStatus.WAITING
    ).exclude(signal_name="")
    if name is not None:
        query = query.filter(signal_name=name)
    return query.order_by("-seq").first()


def commit_signal_wait(ctx, worker_id: str) -> None:
    """Called by the executor when a signal step's function returned: in one transaction
    fenced by the attempt, the step takes the oldest kept signal of its name if there is
    one (and the run goes on), else it goes WAITING (lease released, ``signal_name`` and
    ``wait_until`` set) and the run WAITING_EXTERNAL. A cancel requested meanwhile
    cancels the step instead."""
    run, step, attempt, step_def = ctx.run, ctx.step, ctx.attempt, ctx.step_def
    name, timeout = step_def.options["signal"], step_def.options["timeout"]
    on_timeout = step_def.options["on_timeout"]
    if on_timeout is not None:
        ctx.workflow.get(on_timeout)
    with run_transaction(run.pk) as tx:
        if tx.cancelled_before_wait(step, attempt, actor=worker_id, waiting_for="signal wait"):
            return
        kept = _oldest_kept(run.pk, name)
        if kept is not None:
            output = _output(kept)
            if not tx.finish_attempt(
                step,
                attempt,
                StepStatus.SUCCEEDED,
                actor=worker_id,
                payload={"attempt": attempt, "signal": name, "request_id": kept.request_id},
                output=output,
                owner="",
                lease_until=None,
                finished_at=Now(),
            ):
                return
            _consume(tx, step, kept, ctx.workflow, output, worker_id)
            return
        if not tx.finish_waiting(
            step,
            attempt,
            actor=worker_id,
            waiting_for="signal",
            payload={"signal": name, "timeout_s": timeout},
            cancel_before="signal wait",
            signal_name=name,
            wait_until=deadline_in(timeout),
        ):
            return
        tx.transition_run(
            RunStatus.WAITING_EXTERNAL,
            actor=worker_id,
            reason=f"waiting for signal {name}",
            current_step=step.pk,
        )


def deliver_signal(
    run_id,
    name: str,
    payload: Any = None,
    *,
    request_id: str | None = None,
    actor: str,
) -> Delivery:
    """Deliver the signal ``name`` with the JSON ``payload`` (``None``: ``{}``) to the
    run ``run_id``, as ``actor``. ``request_id`` is the sender's idempotency key (a new
    one when left out): the same id again returns the first delivery unchanged.

    When the run waits for ``name`` the waiting step succeeds with
    ``{"signal", "payload", "request_id"}`` and the run goes on (past its deadline, the
    wait times out first and the signal is kept); otherwise the signal is kept for the
    run's next wait for it. Raises ``ControlError``: ``invalid_input`` (a name
    that breaks the name rule, a payload that fails the waiting step's schema: nothing
    is stored), ``invalid_idempotency_key`` (a blank, long or control-bearing id),
    ``unknown_signal`` (the workflow waits for no such signal), ``run_terminal``,
    ``signal_conflict`` (the request id delivered another payload before);
    ``Run.DoesNotExist`` for an unknown run.
    """
    payload = {} if payload is None else payload
    check_identifier(name, "signal", "name")
    request_id = (
        uuid.uuid4().hex
        if request_id is None
        else check_identifier(request_id, "request_id").strip()
    )
    with run_transaction(run_id) as tx:
        run = tx.run
        earlier = Signal.objects.filter(run_id=run.pk, name=name, request_id=request_id).first()
        if earlier is not None:
            if earlier.payload != payload:
                raise ControlError(
                    "signal_conflict",
                    f"request id {request_id!r} delivered signal {name} with another payload",
                )
            return Delivery(earlier, earlier.step_id is not None, True)
        if run.status in RUN_TERMINAL:
            raise ControlError(
                "run_terminal", f"run is {run.status}; a finished run takes no signals"
            )
        workflow = registry.get(run.workflow, run.workflow_version)
        declared = workflow.signal_steps(name)
        if not declared:
            known = sorted({s.options["signal"] for s in workflow.steps if s.kind == "signal"})
            raise ControlError(
                "unknown_signal",
                f"{workflow.name} waits for no signal {name!r}; it waits for: "
                + (", ".join(known) or "none"),
                {"name": "unknown signal"},
            )
        waiting = waiting_step(run.pk, run.generation, name)
        targets = [workflow.get(waiting.name)] if waiting is not None else declared
        for step_def in targets:
            errors = payload_errors(step_def.options["schema"], payload)
            if errors:
                raise ControlError(
                    "invalid_input", f"payload of signal {name} is not valid", errors
                )
        if (
            waiting is not None
            and run.status == RunStatus.WAITING_EXTERNAL
            and waiting.wait_until is not None
        ):
            if waiting.wait_until <= db_now():
                # The deadline passed before this delivery: the wait ends on its timeout
                # route and the signal is kept for a later wait.
                time_out(tx, waiting, workflow, actor)
                waiting = None
        signal = Signal.objects.create(
            run_id=run.pk, name=name, request_id=request_id, payload=payload, actor=actor
        )
        tx.event(
            "signal.received",
            {"signal": name, "request_id": request_id, "payload": payload},
            step_id=waiting.pk if waiting is not None else None,
            actor=actor,
        )
        if waiting is None or run.status != RunStatus.WAITING_EXTERNAL:
            return Delivery(signal, False, False)
        output = _output(signal)
        tx.transition_step(
            waiting.pk,
            StepStatus.SUCCEEDED,
            expected=StepStatus.WAITING,
            actor=actor,
            payload={"signal": name, "request_id": request_id},
            output=output,
            finished_at=Now(),
            wait_until=None,
        )
        _consume(tx, waiting, signal, workflow, output, actor)
    signal.refresh_from_db()
    return Delivery(signal, True, False)


def take_kept_signal(tx: RunTx, actor: str) -> bool:
    """A run that goes back to waiting (its takeover resolved with resume) takes a signal
    kept meanwhile: the waiting step succeeds with it and the run goes on. Returns
    ``True`` if one was taken."""
    step = waiting_step(tx.run.pk, tx.run.generation)
    if step is None:
        return False
    kept = _oldest_kept(tx.run.pk, step.signal_name)
    if kept is None:
        return False
    workflow = registry.get(tx.run.workflow, tx.run.workflow_version)
    output = _output(kept)
    tx.transition_step(
        step.pk,
        StepStatus.SUCCEEDED,
        expected=StepStatus.WAITING,
        actor=actor,
        payload={"signal": kept.name, "request_id": kept.request_id},
        output=output,
        finished_at=Now(),
        wait_until=None,
    )
    _consume(tx, step, kept, workflow, output, actor)
    return True


def expire_signal_waits(actor: str, batch: int) -> int:
    """Sweeper task: signal waits past their ``wait_until`` that no delivery touched take
    their timeout route. Returns how many timed out."""
    due = list(
        Step.objects.filter(
            status=StepStatus.WAITING,
            wait_until__lt=Now(),
            run__status=RunStatus.WAITING_EXTERNAL,
        )
        .exclude(signal_name="")
        .order_by("wait_until")
        .values_list("pk", "run_id")[:batch]
    )
    done = 0
    for step_id, run_id in due:
        with run_transaction(run_id) as tx:
            step = Step.objects.filter(
                pk=step_id, status=StepStatus.WAITING, wait_until__lt=Now()
            ).first()
            if step is None or tx.run.status != RunStatus.WAITING_EXTERNAL:
                continue
            workflow = registry.get(tx.run.workflow, tx.run.workflow_version)
            time_out(tx, step, workflow, actor)
            done += 1
    return done


def next_deadline() -> datetime | None:
    """The earliest deadline of a signal wait (the sweeper wakes then)."""
    return (
        Step.objects.filter(
            status=StepStatus.WAITING,
            wait_until__isnull=False,
            run__status=RunStatus.WAITING_EXTERNAL,
        )
        .order_by("wait_until")
        .values_list("wait_until", flat=True)
        .first()
    )


def time_out(tx: RunTx, step: Step, workflow: Workflow, actor: str) -> None:
    """End the signal wait of ``step`` (WAITING, its deadline passed) with
    ``{"signal", "timed_out": True}`` and a ``signal.timed_out`` event; the run goes to
    the step's ``on_timeout`` route, or fails with SIGNAL_TIMEOUT when it has none."""
    step_def: StepDef = workflow.get(step.name)
    output = {"signal": step.signal_name, "timed_out": True}
    tx.transition_step(
        step.pk,
        StepStatus.SUCCEEDED,
        expected=StepStatus.WAITING,
        actor=actor,
        event_type="signal.timed_out",
        payload={"signal": step.signal_name},
        output=output,
        finished_at=Now(),
        wait_until=None,
    )
    route = step_def.options["on_timeout"]
    if route is None:
        tx.save_checkpoint(step, previous=None, output=output, next_name=None, actor=actor)
        tx.transition_run(
            RunStatus.FAILED,
            actor=actor,
            reason=f"no signal {step.signal_name} before the deadline",
            finished_at=Now(),
            current_step=None,
            error_code="SIGNAL_TIMEOUT",
            error_detail=f"no signal {step.signal_name} before the deadline",
        )
        return
    tx.advance(step, output=output, next_name=route, actor=actor, reason="signal timeout")


def _consume(
    tx: RunTx, step: Step, signal: Signal, workflow: Workflow, output: dict, actor: str
) -> None:
    """Mark ``signal`` taken by ``step`` (which just succeeded with ``output``) and go on
    with the step declared after it."""
    Signal.objects.filter(pk=signal.pk).update(step=step, consumed_at=Now())
    tx.event(
        "signal.consumed",
        {"signal": signal.name, "request_id": signal.request_id},
        step_id=step.pk,
        actor=actor,
    )
    tx.advance(
        step,
        output=output,
        next_name=workflow.next_after(step.name),
        actor=actor,
        reason=f"signal {signal.name}",
    )


def _oldest_kept(run_id, name: str) -> Signal | None:
    return (
        Signal.objects.filter(run_id=run_id, name=name, consumed_at__isnull=True)
        .order_by("created_at", "pk")
        .first()
    )


def _output(signal: Signal) -> dict[str, Any]:
    return {"signal": signal.name, "payload": signal.payload, "request_id": signal.request_id}


__all__ = [
    "Delivery",
    "commit_signal_wait",
    "deliver_signal",
    "expire_signal_waits",
    "next_deadline",
    "payload_errors",
    "take_kept_signal",
    "time_out",
    "waiting_step",
]
