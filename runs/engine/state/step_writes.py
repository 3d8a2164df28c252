"""What a step's commit writes besides its status and checkpoint: the thread messages
and summaries it staged, in the locked run's transaction."""

from typing import Any

from django.db import IntegrityError, transaction

from runs.engine.state.gateway import RunTx, allocate_message_seqs
from runs.models import Message, Run, Summary


def write_messages(tx: RunTx, step_id: int, messages: list[dict[str, Any]], actor: str) -> int:
    """Make the step's streamed drafts among ``messages`` final and insert the others
    with gap-free thread seqs; returns the thread's last message seq afterwards."""
    from runs.engine.data import drafts

    # Streamed drafts already hold a seq: they only become final here.
    for m in messages:
        if m.get("draft"):
            drafts.finalize(tx, step_id=step_id, message=m, actor=actor)
    staged = [m for m in messages if not m.get("draft")]
    return insert_messages(tx, tx.run, step_id, staged, actor)


def insert_messages(
    tx: RunTx, run: Run, step_id: int, staged: list[dict[str, Any]], actor: str
) -> int:
    """Insert ``staged`` messages (``{id, role, content, tool_calls, tool_call_id}``,
    values checked) of step ``step_id`` with gap-free thread seqs and their
    ``message.created`` events; returns the thread's last message seq after the insert."""
    thread_id = run.thread_id
    first, last = allocate_message_seqs(thread_id, len(staged))
    rows = [
        Message(
            thread_id=thread_id,
            run_id=run.pk,
            step_id=step_id,
            seq=first + i,
            message_id=m["id"],
            role=m["role"],
            content=m["content"],
            tool_calls=m["tool_calls"],
            tool_call_id=m["tool_call_id"] or "",
        )
        for i, m in enumerate(staged)
    ]
    Message.objects.bulk_create(rows)
    for row in rows:
        tx.event(
            "message.created",
            {"message_id": row.message_id, "role": row.role, "seq": row.seq},
            step_id=step_id,
            actor=actor,
        )
    return last


def write_summaries(tx: RunTx, step_id: int, summaries: list[dict[str, Any]], actor: str) -> None:
    """Insert the step's staged summaries (``{first_seq, last_seq, tokens, ...}``). A
    summary of the same range committed meanwhile by another run of the thread is kept
    instead."""
    for s in summaries:
        try:
            with transaction.atomic():
                summary = Summary.objects.create(
                    thread_id=tx.run.thread_id, run_id=tx.run.pk, step_id=step_id, **s
                )
        except IntegrityError:
            continue
        tx.event(
            "summary.created",
            {
                "summary_id": summary.pk,
                "covers": [s["first_seq"], s["last_seq"]],
                "tokens": s["tokens"],
            },
            step_id=step_id,
            actor=actor,
        )
