"""The store's moves as short Django transactions on the locked run (``RunTx``).

The SQLite backend: SQLite has one writer, so a move is a transaction of a few small
statements. The PostgreSQL backend inherits these moves for what its single statements
decline (a move inside an open transaction, a commit with drafts, summaries or a timer,
a claim that needs the process to prepare first) and takes ``schedule``, ``decide`` and
``resolve`` as they are: they act inside the caller's transaction.
"""

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.functions import Now

from runs.engine.data import payloads
from runs.engine.execution import dispatch
from runs.engine.state import checkpoints, concurrency, leases
from runs.engine.state.checkpoints import initial_state
from runs.engine.state.gateway import (
    RunTx,
    allocate_message_seqs,
    run_transaction,
    transition_operation,
)
from runs.engine.state.step_writes import write_messages, write_summaries
from runs.engine.state.store_interface import (
    CLAIMED,
    LEASE,
    NOT_CLAIMABLE,
    PREPARE,
    Claim,
    Committed,
    Decision,
    Due,
    NewRun,
    Resolution,
    StepCommit,
)
from runs.engine.state.values import storable
from runs.models import Approval, Message, Run, Step, Thread
from runs.states import RUN_EXECUTABLE, RunStatus, StepStatus


class OrmStore:
    """``Store`` through the ORM and the gateway's ``RunTx`` moves."""

    def claim(self, step_id: int, worker_id: str, ttl: float, *, known: list[str]) -> Claim:
        """``Store.claim`` in one transaction on the locked run."""
        return self._claim(step_id, worker_id, ttl, known, read_checkpoint=True)

    def claim_due(self, worker_id: str, ttl: float, limit: int, *, known: list[str]) -> list[Step]:
        """``Store.claim_due`` as one transaction per step (the oldest due first)."""
        claimed = []
        for step_id in leases.due_step_ids(limit):
            claim = self._claim(step_id, worker_id, ttl, known, read_checkpoint=False)
            if claim.outcome == CLAIMED and claim.step is not None:
                claimed.append(claim.step)
        return claimed

    def heartbeat(self, held: list[tuple[int, int]], ttl: float) -> dict[int, str]:
        """``Store.heartbeat`` in one statement (the same on both backends)."""
        return leases.renew_leases(held, ttl)

    def _claim(
        self, step_id: int, worker_id: str, ttl: float, known: list[str], *, read_checkpoint: bool
    ) -> Claim:
        run_id = Step.objects.filter(pk=step_id).values_list("run_id", flat=True).first()
        if run_id is None:
            return Claim(NOT_CLAIMABLE)
        with run_transaction(run_id) as tx:
            run = tx.run
            step = Step.objects.filter(leases.due(), pk=step_id).first()
            if (
                step is None
                or run.status not in RUN_EXECUTABLE
                # A pause is requested: its steps wait (held) until it is resumed.
                or run.pause_requested_at is not None
                or run.generation != step.generation
            ):
                return Claim(NOT_CLAIMABLE)
            key = f"{run.workflow}@{run.workflow_version}"
            if key not in known:
                step.run = run
                return Claim(PREPARE, run, step)
            if not concurrency.may_start(run) or not concurrency.may_run_step(step):
                # Due for a notification again once a place frees (the sweeper sends it).
                Step.objects.filter(pk=step.pk).update(notified_at=None)
                return Claim(NOT_CLAIMABLE)
            attempt = leases.claim_step(step.pk, worker_id, ttl)
            if attempt is None:
                return Claim(NOT_CLAIMABLE)
            if run.status == RunStatus.PENDING:
                tx.transition_run(RunStatus.RUNNING, actor=worker_id, started_at=Now())
            tx.set_run(current_step_id=step.pk)
            payload = {"attempt": attempt, "worker": worker_id}
            if step.status == StepStatus.RUNNING:
                payload["reclaimed_from"] = step.owner
            tx.event("step.started", payload, step_id=step.pk, actor=worker_id)
            checkpoint_id, state = checkpoints.latest(run) if read_checkpoint else (None, None)
            step.refresh_from_db()
        run.current_step_id = step.pk
        step.run = run
        return Claim(CLAIMED, run, step, checkpoint_id, state)

    def commit(self, commit: StepCommit) -> Committed:
        """``Store.commit`` in one transaction: ``RunTx.finish_attempt``, the messages
        and summaries, then ``RunTx.advance``."""
        c = commit
        step, actor = c.step, c.worker_id
        with run_transaction(c.run.pk) as tx:
            if not tx.finish_attempt(
                step,
                c.attempt,
                StepStatus.SUCCEEDED,
                actor=actor,
                payload={"attempt": c.attempt, "worker": actor},
                output=payloads.externalize(c.run.pk, c.output),
                finished_at=Now(),
                lease_until=None,
                owner=actor,
                error_code="",
                error_detail="",
            ):
                return Committed(False)
            message_seq = write_messages(tx, step.pk, c.messages, actor)
            write_summaries(tx, step.pk, c.summaries, actor)
            # tx.run is the row locked at the start of this transaction, after all of the
            # step's budget charges: its usage counters are current without a re-read.
            advanced = tx.advance(
                step,
                output=c.output,
                next_name=c.next_name,
                actor=actor,
                previous=c.state,
                previous_id=c.checkpoint_id,
                base_state=c.checkpoint_state,
                message_seq=message_seq,
                refresh_usage=False,
                next_seq=tx.next_step_seq(after=step),
                claimed_by=c.claimed_by,
                delay=c.delay,
                at=c.at,
            )
        run = tx.run
        done = Committed(
            True,
            advanced.step_id,
            checkpoint_id=advanced.checkpoint_id,
            state=advanced.state,
            finished=advanced.step_id is None and run.status == RunStatus.SUCCEEDED,
            run=run,
        )
        held = c.claimed_by is not None and not c.delay and c.at is None
        if advanced.step_id is not None and advanced.seq is not None and held:
            done.next_step = born_step(
                run, advanced.step_id, c.next_name or "", advanced.seq, c.claimed_by or ""
            )
        return done

    def create_run(self, new: NewRun) -> tuple[Run, bool]:
        """``Store.create_run`` in one transaction (a savepoint inside an enclosing one,
        so a lost race on the key leaves the caller's transaction usable)."""
        if new.request_id:
            existing = _keyed_run(new)
            if existing is not None:
                return existing, False
        try:
            with transaction.atomic():
                run = _insert_run(new)
        except IntegrityError:
            # Another creation with this key committed first: the constraint decided.
            existing = _keyed_run(new) if new.request_id else None
            if existing is None:
                raise
            return existing, False
        run.refresh_from_db()
        return run, True

    def schedule(self, tx: RunTx, due: Due) -> bool:
        """``Store.schedule`` through ``RunTx.finish_attempt`` (a fenced attempt),
        ``RunTx.transition_step`` (a step nobody holds) or, for a PENDING step, a new
        ``not_before`` and ``notified_at``."""
        step = due.step
        fields: dict[str, Any] = {**due.fields, "not_before": due.at or Now()}
        if not due.counted:
            fields["attempt_base"] = F("attempt_base") + 1
        if due.attempt is not None:
            fields.update(owner="", lease_until=None)
            applied = self._give_back(tx, due, fields)
        elif step.status == StepStatus.PENDING:
            # Nobody's to move: only its time (and a notification sent now, when due now).
            fields["notified_at"] = Now() if due.notify else None
            Step.objects.filter(pk=step.pk, status=StepStatus.PENDING).update(**fields)
            applied = True
        else:
            if due.notify:
                fields["notified_at"] = Now()
            applied = tx.transition_step(
                step.pk,
                StepStatus.PENDING,
                expected=step.status,
                actor=due.actor,
                event_type=due.event_type,
                payload=due.payload,
                progress=due.progress,
                owner="",
                lease_until=None,
                **fields,
            )
        if applied and due.notify:
            dispatch.notify_on_commit(tx.run.pk, step.pk, step.attempt)
        return applied

    @staticmethod
    def _give_back(tx: RunTx, due: Due, fields: dict[str, Any]) -> bool:
        step, attempt = due.step, due.attempt or 0
        if due.fence == LEASE:
            return tx.finish_attempt(
                step,
                attempt,
                StepStatus.PENDING,
                actor=due.actor,
                event_type=due.event_type,
                payload=due.payload,
                rejected=due.rejected,
                progress=due.progress,
                **fields,
            )
        applied = tx.transition_step(
            step.pk,
            StepStatus.PENDING,
            expected=StepStatus.RUNNING,
            attempt=attempt,
            actor=due.actor,
            event_type=due.event_type,
            payload=due.payload,
            progress=due.progress,
            **fields,
        )
        if not applied:
            # Another worker took the step meanwhile: the late write is fenced, and said so.
            reason = tx.commit_rejection(step, attempt)
            tx.reject_commit(step, attempt, reason, worker=due.actor, **due.rejected)
        return applied

    def decide(self, tx: RunTx, decision: Decision) -> bool:
        """``Store.decide`` through ``RunTx.decide_approval``, ``transition_step``,
        ``save_checkpoint``, ``transition_run`` and ``advance``."""
        d = decision
        if not d.recorded and not tx.decide_approval(
            d.approval_id,
            d.target,
            actor=d.actor,
            payload=d.payload,
            step_id=d.step_id,
            only_if=d.only_if,
            **d.fields,
        ):
            return False
        if tx.run.status == RunStatus.WAITING_APPROVAL or d.recorded:
            _continue_after(tx, d)
        return True

    def resolve(self, tx: RunTx, resolution: Resolution) -> Any:
        """``Store.resolve`` through ``RunTx.resolve_takeover``, ``transition_operation``
        and ``schedule``."""
        r = resolution
        takeover = tx.resolve_takeover(r.actor, r.note, r.takeover, record=r.record, **r.match)
        if takeover is None and r.takeover is not None:
            return None  # Resolved by someone else first: a stale resolution writes nothing.
        op = r.operation
        if op is not None:
            result = storable(r.operation_result, "tool result")
            transition_operation(
                op, r.operation_status, result=payloads.externalize(op.run_id, result)
            )
            op.result = result
        if r.due is not None:
            self.schedule(tx, r.due)
        return takeover


#: The route an approval's decision takes (``Approval.routes`` keys), by its status;
#: any other (a cancelled approval found by a resumed run) takes the expiry route.
ROUTES: dict[str, str] = {
    Approval.Status.APPROVED: "approve",
    Approval.Status.REJECTED: "reject",
    Approval.Status.EXPIRED: "expire",
}


def _continue_after(tx: RunTx, d: Decision) -> None:
    """The waiting step succeeds with ``d.output``, a checkpoint is saved, and the run
    continues on the approval's route for the decision; no route on reject or expiry
    fails the run (APPROVAL_REJECTED / APPROVAL_EXPIRED)."""
    routes = Approval.objects.values_list("routes", flat=True).get(pk=d.approval_id)
    route = ROUTES.get(d.target, "expire")
    next_name = routes.get(route)
    step = Step.objects.get(pk=d.step_id)
    tx.transition_step(
        step.pk,
        StepStatus.SUCCEEDED,
        expected=StepStatus.WAITING,
        actor=d.actor,
        payload={"approval_id": d.approval_id, **d.output},
        output=d.output,
        finished_at=Now(),
    )
    if next_name is None and route != "approve":
        tx.save_checkpoint(step, previous=None, output=d.output, next_name=None, actor=d.actor)
        code = "APPROVAL_REJECTED" if route == "reject" else "APPROVAL_EXPIRED"
        tx.transition_run(
            RunStatus.FAILED,
            actor=d.actor,
            reason=f"approval {d.approval_id} {route}",
            finished_at=Now(),
            current_step=None,
            error_code=code,
            error_detail=d.output.get("comment", ""),
        )
        return
    tx.advance(
        step,
        output=d.output,
        next_name=next_name,
        actor=d.actor,
        reason=f"approval {d.approval_id}: {route}",
    )


def _keyed_run(new: NewRun) -> Run | None:
    return Run.objects.filter(owner=new.owner, request_id=new.request_id).first()


def _insert_run(new: NewRun) -> Run:
    try:
        with transaction.atomic():
            thread, _ = Thread.objects.get_or_create(owner=new.owner, thread_id=new.thread_id)
    except IntegrityError:
        thread = Thread.objects.get(owner=new.owner, thread_id=new.thread_id)
    parent = new.parent_step
    run = Run.objects.create(
        thread=thread,
        owner=new.owner,
        workflow=new.workflow,
        workflow_version=new.version,
        input=new.input,
        goal=(new.goal or "")[:2000],
        budget=new.budget,
        faults=new.faults,
        request_id=new.request_id,
        request_fingerprint=new.request_fingerprint,
        concurrency_key=new.concurrency_key,
        concurrency_limit=new.concurrency_limit,
        parent_run_id=parent.run_id if parent is not None else None,
        parent_step=parent,
        child_position=new.child_position,
        detached=new.detached,
    )
    created: dict[str, Any] = {
        "workflow": new.workflow,
        "version": new.version,
        "thread": new.thread_id,
    }
    if parent is not None:
        created.update(
            parent_run=str(parent.run_id), parent_step=parent.name,
            position=new.child_position, detached=new.detached,
        )  # fmt: skip
    with run_transaction(run.pk) as tx:
        tx.event("run.created", created, actor=new.actor)
        seq = allocate_message_seqs(thread.pk, 0 if new.goal is None else 1)[1]
        if new.goal is not None:
            message = Message.objects.create(
                thread=thread,
                run=run,
                seq=seq,
                message_id=f"msg_{uuid.uuid4().hex}",
                role=Message.Role.USER,
                content=new.goal,
            )
            tx.event(
                "message.created",
                {"message_id": message.message_id, "role": "user", "seq": seq},
                actor=new.actor,
            )
        state = initial_state(run, new.first_step)
        state["message_seq"] = seq
        checkpoints.store(run, None, "start", state)
        tx.schedule_step(new.first_step, seq=1, actor=new.actor)
    return run


def born_step(run: Run, step_id: int | None, name: str, seq: int, owner: str) -> Step:
    """The next step as its commit inserted it: RUNNING at attempt 1 under ``owner``'s
    lease, in ``run``'s generation. Built from the field defaults by position, which
    costs a fraction of the keyword path of ``Model.__init__`` on every chained step."""
    values: dict[str, Any] = dict(_STEP_DEFAULTS)
    values.update(
        id=step_id,
        run_id=run.pk,
        name=name,
        seq=seq,
        generation=run.generation,
        status=StepStatus.RUNNING,
        attempt=1,
        owner=owner,
        input={},
    )
    born = Step(*values.values())
    born.run = run
    return born


#: ``{attname: default}`` of every concrete Step field, in field order.
_STEP_DEFAULTS = {f.attname: f.get_default() for f in Step._meta.concrete_fields}
