"""Streamed messages with stable ids: a draft row before generation, ``message.delta``
events while the model streams, the final content at the step's fenced commit.

Event payloads (the SSE stream carries them as they are):

- ``message.started``: ``{message_id, role, seq, attempt}``; a draft exists from here.
- ``message.delta``: ``{message_id, offset, text}``; ``offset`` is the character offset
  of ``text`` in the message, so a client can place a piece exactly once.
- ``message.superseded``: ``{message_id, replaced_by, attempt}``; an earlier attempt's
  draft (its worker died or lost its lease) is dropped in favour of ``replaced_by``, or
  (``replaced_by`` null, with a ``reason``) the run was cancelled mid-generation.
- ``message.completed``: ``{message_id, role, seq}``; the draft is now final, with the
  whole content. It is written only by the commit of the attempt that owns the step, so
  a half message is never final.

Every write is fenced by the step's attempt: a worker that lost its lease gets
``LeaseLost`` and writes nothing.
"""

from typing import Any

from runs.engine.errors import CancelRequested, LeaseLost
from runs.engine.state import values
from runs.engine.state.gateway import RunTx, allocate_message_seqs, run_transaction
from runs.models import Message, Step
from runs.states import RUN_TERMINAL


def draft_message_id(run_id, step_id: int, index: int, attempt: int) -> str:
    """The id of the ``index``-th message of a step's ``attempt``: unique per attempt,
    so a retry's draft never collides with the one it replaces."""
    return f"msg_{run_id.hex[:8]}_{step_id}_{index}_a{attempt}"


def _fence(tx: RunTx, step: Step, attempt: int) -> None:
    if tx.run.status in RUN_TERMINAL:
        raise CancelRequested(f"run is {tx.run.status}")
    if tx.commit_rejection(step, attempt) is not None:
        raise LeaseLost(f"step {step.name} attempt {attempt} no longer holds the step")


def begin(
    *, run_id, thread_id: int, step: Step, attempt: int, role: str, index: int, actor: str
) -> str:
    """Commit an empty draft message for this attempt and return its ``message_id``.

    Earlier attempts' drafts of the same step are marked superseded in the same
    transaction (one ``message.superseded`` event each); this attempt's own drafts stay
    (a step may stream several messages). Raises ``LeaseLost`` / ``CancelRequested``
    when the attempt may no longer write.
    """
    message_id = draft_message_id(run_id, step.pk, index, attempt)
    with run_transaction(run_id) as tx:
        _fence(tx, step, attempt)
        supersede_drafts(tx, step_id=step.pk, replaced_by=message_id, attempt=attempt, actor=actor)
        seq = allocate_message_seqs(thread_id, 1)[1]
        Message.objects.create(
            thread_id=thread_id,
            run_id=run_id,
            step_id=step.pk,
            seq=seq,
            message_id=message_id,
            role=role,
            content="",
            status=Message.Status.DRAFT,
        )
        tx.event(
            "message.started",
            {"message_id": message_id, "role": role, "seq": seq, "attempt": attempt},
            step_id=step.pk,
            actor=actor,
        )
    return message_id


def supersede_drafts(
    tx: RunTx, *, step_id: int, replaced_by: str | None, attempt: int, actor: str
) -> int:
    """Mark the step's drafts of attempts other than ``attempt`` superseded (and none
    named ``replaced_by``), with an event each; returns how many."""
    stale = list(
        Message.objects.filter(step_id=step_id, status=Message.Status.DRAFT)
        .exclude(message_id=replaced_by or "")
        .exclude(message_id__endswith=f"_a{attempt}")
        .values_list("pk", "message_id")
    )
    for pk, message_id in stale:
        Message.objects.filter(pk=pk).update(status=Message.Status.SUPERSEDED)
        tx.event(
            "message.superseded",
            {"message_id": message_id, "replaced_by": replaced_by, "attempt": attempt},
            step_id=step_id,
            actor=actor,
        )
    return len(stale)


def delta(
    *,
    run_id,
    step: Step,
    attempt: int,
    message_id: str,
    offset: int,
    text: str,
    content: str,
    actor: str,
) -> None:
    """Record one streamed piece: a ``message.delta`` event and the draft's content so
    far (``content``, which ends with ``text``). Fenced like ``begin``.

    Text is stored as ``values.storable_text`` makes it (NUL escaped), and ``offset``
    (a character offset into ``content`` as the model wrote it) is recorded as the
    offset into the stored content, so a client placing the stored pieces rebuilds
    exactly the draft's content."""
    offset = len(values.storable_text(content[:offset]))
    text = values.storable_text(text)
    content = values.storable_text(content)
    with run_transaction(run_id) as tx:
        _fence(tx, step, attempt)
        Message.objects.filter(message_id=message_id, status=Message.Status.DRAFT).update(
            content=content
        )
        tx.event(
            "message.delta",
            {"message_id": message_id, "offset": offset, "text": text},
            step_id=step.pk,
            actor=actor,
        )


def abandon(
    *, run_id, step_id: int, message_id: str, attempt: int, reason: str, actor: str
) -> bool:
    """Mark the draft ``message_id`` superseded with nothing replacing it (its attempt
    stopped for a cancel), with a ``message.superseded`` event whose ``replaced_by`` is
    ``None``. Returns ``False`` if it is no longer a draft."""
    with run_transaction(run_id) as tx:
        moved = Message.objects.filter(message_id=message_id, status=Message.Status.DRAFT).update(
            status=Message.Status.SUPERSEDED
        )
        if moved:
            tx.event(
                "message.superseded",
                {
                    "message_id": message_id,
                    "replaced_by": None,
                    "attempt": attempt,
                    "reason": reason,
                },
                step_id=step_id,
                actor=actor,
                progress=False,
            )
    return bool(moved)


def finalize(tx: RunTx, *, step_id: int, message: dict[str, Any], actor: str) -> int | None:
    """Inside the step's fenced commit: make the draft ``message["id"]`` final with its
    whole content. Returns its seq, or ``None`` if no such draft exists."""
    row = (
        Message.objects.filter(
            message_id=message["id"], step_id=step_id, status=Message.Status.DRAFT
        )
        .values_list("pk", "seq", "role")
        .first()
    )
    if row is None:
        return None
    pk, seq, role = row
    Message.objects.filter(pk=pk).update(
        status=Message.Status.FINAL,
        content=message["content"],
        tool_calls=message.get("tool_calls") or [],
        tool_call_id=message.get("tool_call_id") or "",
    )
    tx.event(
        "message.completed",
        {"message_id": message["id"], "role": role, "seq": seq},
        step_id=step_id,
        actor=actor,
    )
    return seq
