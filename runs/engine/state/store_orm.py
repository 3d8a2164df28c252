"""The store's moves as short Django transactions on the locked run (``RunTx``).

The SQLite backend: SQLite has one writer, so a move is a transaction of a few small
statements. The PostgreSQL backend inherits these moves for what its single statements
decline (a move inside an open transaction, a commit with drafts, summaries or a timer,
a claim that needs the process to prepare first).
"""

from typing import Any

from django.db.models.functions import Now

from runs.engine.data import payloads
from runs.engine.state import checkpoints, concurrency, leases
from runs.engine.state.gateway import run_transaction
from runs.engine.state.step_writes import write_messages, write_summaries
from runs.engine.state.store import CLAIMED, NOT_CLAIMABLE, PREPARE, Claim, Committed, StepCommit
from runs.models import Run, Step
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

    def heartbeat(self, held: list[tuple[int, int]], ttl: float) -> set[int]:
        """``Store.heartbeat`` in one statement."""
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
            if key not in known or run.faults.get("crash_before") == step.name:
                step.run = run
                return Claim(PREPARE, run, step)
            if not concurrency.may_start(run):
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
