"""The PostgreSQL store: the claim, the claim of k due steps and the commit of a step
with its successor are one autocommitted statement each (``one_claim``,
``one_statement``), one round trip. What a statement declines, and any move inside an
open transaction (a statement must be its own transaction), takes the transactional
move of ``OrmStore``, which writes the same rows and events. ``heartbeat`` is one
statement on both backends, and ``create_run`` is ``OrmStore``'s: a run is created once,
off the hot path, where one statement would not pay for a second copy of the move. So are
``schedule``, ``decide`` and ``resolve``: they act inside the caller's open transaction,
where a statement cannot be its own, and none of them is on the hot path."""

from typing import Any

from django.conf import settings
from django.db import connection

from runs.engine.state import checkpoints, one_claim, one_statement
from runs.engine.state.store_interface import Claim, Committed, StepCommit
from runs.engine.state.store_orm import OrmStore, born_step
from runs.models import Step
from runs.states import RunStatus


class PostgresStore(OrmStore):
    """``Store`` on PostgreSQL: one statement per claim and per commit where it applies."""

    def claim(self, step_id: int, worker_id: str, ttl: float, *, known: list[str]) -> Claim:
        """``Store.claim``: the one-statement claim, or the transactional one when it
        declines (the process must prepare, or the run moved under its snapshot)."""
        if connection.get_autocommit():
            claim = one_claim.claim_step(step_id, worker_id, ttl, known=known)
            if claim is not None:
                return claim
        return super().claim(step_id, worker_id, ttl, known=known)

    def claim_due(self, worker_id: str, ttl: float, limit: int, *, known: list[str]) -> list[Step]:
        """``Store.claim_due`` in one statement, steps and runs locked ``FOR UPDATE SKIP
        LOCKED``."""
        if not connection.get_autocommit():
            return super().claim_due(worker_id, ttl, limit, known=known)
        return one_claim.claim_due(worker_id, ttl, limit, known=known)

    def commit(self, commit: StepCommit) -> Committed:
        """``Store.commit`` in one statement when the step chains on (born claimed) or
        finishes the run and wrote no drafts, summaries or payloads too large to inline;
        the transactional commit otherwise, and when the fence refused (it records why)."""
        done = self._one_statement(commit) if self._fits(commit) else None
        return done if done is not None else super().commit(commit)

    @staticmethod
    def _fits(c: StepCommit) -> bool:
        chained = c.claimed_by is not None and not c.delay and c.at is None
        return (
            (chained or c.next_name is None)
            and not any(m.get("draft") for m in c.messages)
            and not c.summaries
            and c.checkpoint_id is not None
            # A keyed step's end frees a place: the transactional commit tells the next.
            and c.step.concurrency_key is None
            and connection.get_autocommit()
        )

    @staticmethod
    def _one_statement(c: StepCommit) -> Committed | None:
        run, step = c.run, c.step
        state: dict[str, Any] = checkpoints.next_state(
            c.state,
            run=run,
            step=step,
            output=c.output,
            next_name=c.next_name,
            message_seq=c.state.get("message_seq", 0),
            refresh_usage=False,
        )
        change = checkpoints.delta(c.checkpoint_state, state)
        if (
            change is None
            or c.checkpoint_id is None
            or not one_statement.inline(c.output)
            or not one_statement.inline(change)
        ):
            return None
        next_seq = step.seq + 1 if c.next_name is not None else None
        row = one_statement.commit_step(
            run_id=run.pk,
            thread_id=run.thread_id,
            step_id=step.pk,
            step_name=step.name,
            generation=step.generation,
            attempt=c.attempt,
            worker_id=c.worker_id,
            claimed_by=c.claimed_by or c.worker_id,
            output=c.output,
            base_id=c.checkpoint_id,
            delta=change,
            next_name=c.next_name,
            next_seq=next_seq,
            lease_seconds=settings.AGENTOPS_LEASE_SECONDS,
            messages=c.messages,
        )
        if row is None:
            return None
        state["message_seq"] = row.message_seq
        state["budget_used"] = row.usage()
        run.event_seq, run.version = row.event_seq, row.version
        run.model_calls, run.tool_calls, run.tokens = row.model_calls, row.tool_calls, row.tokens
        run.cost_usd, run.unpriced_model_calls = row.cost_usd, row.unpriced_model_calls
        done = Committed(
            True, row.next_step_id, checkpoint_id=row.checkpoint_id, state=state, run=run
        )
        if c.next_name is None or next_seq is None:
            run.status = RunStatus.SUCCEEDED
            done.finished = True
            return done
        run.current_step_id = row.next_step_id
        done.next_step = born_step(
            run, row.next_step_id, c.next_name, next_seq, c.claimed_by or c.worker_id
        )
        return done
