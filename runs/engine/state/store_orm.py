"""The store's moves as short Django transactions on the locked run (``RunTx``).

The SQLite backend: SQLite has one writer, so a move is a transaction of a few small
statements. The PostgreSQL backend inherits these moves for what its single statements
decline (a move inside an open transaction, a commit with drafts, summaries or a timer,
a claim that needs the process to prepare first).
"""

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from runs.engine.data import payloads
from runs.engine.state import checkpoints, concurrency, leases
from runs.engine.state.checkpoints import initial_state
from runs.engine.state.gateway import allocate_message_seqs, run_transaction
from runs.engine.state.step_writes import write_messages, write_summaries
from runs.engine.state.store_interface import (
    CLAIMED,
    NOT_CLAIMABLE,
    PREPARE,
    Claim,
    Committed,
    NewRun,
    StepCommit,
)
from runs.models import Message, Run, Step, Thread
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
