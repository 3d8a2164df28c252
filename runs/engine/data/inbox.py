"""Messages that arrive on a thread, and the thread's policy while a run is in progress.

A user message is stored at once (a resent message with the same request id is stored
once: the thread row lock serialises arrivals, and ``(thread, request_id)`` is unique).
It becomes a new run. If no run of the thread is in progress, that run starts now.
Otherwise the message is QUEUED (no ``seq`` yet, never part of the running run's
history) and its run waits; with the thread policy ``interrupt`` the running run is
also cancelled through the normal cancel flow (``runs.engine.control.cancel.request_cancel``).
When a run ends, the oldest queued message gets its ``seq`` and its run starts
(``promote_next``, called after the commit of every terminal transition and, as a
safety net for a crash in between, by the sweeper).

Lock order: the thread row, then run rows (a run's commit that writes messages locks the
run, then the thread; so this module never locks a run while holding the thread row
except runs nobody else can see yet).
"""

import logging
import uuid
from dataclasses import dataclass, field

from django.db import IntegrityError, connection, transaction

from runs.engine.control.cancel import request_cancel
from runs.engine.control.lifecycle import check_thread_id, text_refusal
from runs.engine.errors import ControlError
from runs.engine.rules import MAX_CHARS, check_identifier
from runs.engine.state import checkpoints, gateway
from runs.engine.state.checkpoints import initial_state
from runs.engine.state.gateway import run_transaction
from runs.models import Message, Run, Thread
from runs.states import RUN_TERMINAL, RunStatus
from runs.workflows import registry

logger = logging.getLogger("agentops.inbox")


@dataclass
class Posted:
    """Outcome of ``post_message``: the stored ``message`` and its ``run``; ``action``
    is ``started``, ``queued``, ``interrupting`` or ``duplicate`` (a resend: nothing new
    was stored); ``interrupted``: ids of runs asked to cancel."""

    message: Message
    run: Run | None
    action: str
    interrupted: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "message_id": self.message.message_id,
            "seq": self.message.seq,
            "status": self.message.status,
            "run_id": str(self.run.pk) if self.run else None,
            "action": self.action,
            "interrupted": self.interrupted,
        }


def _locked_thread(owner, thread_id: str) -> Thread:
    try:
        with transaction.atomic():
            Thread.objects.get_or_create(owner=owner, thread_id=thread_id)
    except IntegrityError:
        pass  # created concurrently; lock it below
    return Thread.objects.select_for_update().get(owner=owner, thread_id=thread_id)


def active_runs(thread: Thread):
    """Runs of the thread in progress: not terminal and not waiting in the queue."""
    return (
        Run.objects.filter(thread=thread)
        .exclude(status__in=RUN_TERMINAL)
        .exclude(messages__status=Message.Status.QUEUED)
    )


def post_message(
    thread_id: str,
    content: str,
    *,
    owner=None,
    request_id: str | None = None,
    workflow: str | None = None,
    actor: str = "cli",
) -> Posted:
    """Store a user message on ``thread_id`` and start, queue or interrupt per the
    thread's policy. ``workflow`` defaults to the thread's latest run's workflow.

    Raises ``ControlError`` (``invalid_message``, ``invalid_thread``,
    ``invalid_idempotency_key``, ``unknown_workflow``, ``invalid_input``).
    """
    reason = text_refusal(content, limit=MAX_CHARS["thread_message"])
    if reason is not None:
        raise ControlError("invalid_message", f"message {reason}", {"content": reason})
    check_thread_id(thread_id)
    if request_id:
        check_identifier(request_id, "request_id")
    with transaction.atomic():
        thread = _locked_thread(owner, thread_id)
        if request_id:
            existing = (
                Message.objects.filter(thread=thread, request_id=request_id)
                .select_related("run")
                .first()
            )
            if existing is not None:
                return Posted(existing, existing.run, "duplicate")
        wf = _workflow_for(thread, workflow)
        data = {wf.message_field: content}
        errors = wf.validate_input(data)
        concurrency = None if errors else wf.concurrency_of(data)
        if concurrency is None and not errors:
            errors = {"input": "must give the workflow's concurrency key"}
        if errors or concurrency is None:
            raise ControlError("invalid_input", "input is not valid for " + wf.name, errors)
        run = Run.objects.create(
            thread=thread,
            owner=owner,
            workflow=wf.name,
            workflow_version=wf.version,
            input=data,
            goal=content[:2000],
            concurrency_key=concurrency[0],
            concurrency_limit=concurrency[1],
        )
        message = Message.objects.create(
            thread=thread,
            run=run,
            seq=None,
            message_id=f"msg_{uuid.uuid4().hex}",
            role=Message.Role.USER,
            content=content,
            status=Message.Status.QUEUED,
            request_id=request_id or "",
        )
        with run_transaction(run.pk) as tx:
            tx.event(
                "run.created",
                {
                    "workflow": wf.name,
                    "version": wf.version,
                    "thread": thread_id,
                    "message_id": message.message_id,
                },
                actor=actor,
            )
            tx.event(
                "message.queued",
                {"message_id": message.message_id, "request_id": request_id},
                actor=actor,
            )
        running = list(active_runs(thread))
        if not running:
            _promote(thread, message, actor)
            action = "started"
        elif thread.policy == Thread.Policy.INTERRUPT:
            action = "interrupting"
        else:
            action = "queued"
    interrupted = []
    if action == "interrupting":
        # After the commit: request_cancel locks the run row, which must not wait while
        # this transaction holds the thread row (lock order: run, then thread).
        for other in running:
            try:
                request_cancel(
                    other, actor=actor, reason=f"interrupted by message {message.message_id}"
                )
                interrupted.append(str(other.pk))
            except ControlError as exc:  # it ended meanwhile; its end starts ours
                logger.info("interrupt of run %s refused: %s", other.pk, exc.code)
        promote_next(thread.pk, actor=actor)
    message.refresh_from_db()
    run.refresh_from_db()
    return Posted(message, run, action, interrupted)


def _workflow_for(thread: Thread, name: str | None):
    if name is None:
        name = (
            Run.objects.filter(thread=thread)
            .order_by("-created_at")
            .values_list("workflow", flat=True)
            .first()
        ) or "chat"
    try:
        wf = registry.get(name)
    except registry.UnknownWorkflow as exc:
        raise ControlError("unknown_workflow", str(exc), {"workflow": "unknown"}) from exc
    if not wf.message_field:
        raise ControlError(
            "unknown_workflow", f"{wf.name} takes no message", {"workflow": "takes no message"}
        )
    return wf


def _promote(thread: Thread, message: Message, actor: str) -> Run:
    """Give the queued ``message`` its seq and start its run (thread row locked)."""
    run = message.run
    if run is None:
        raise ValueError(f"queued message {message.message_id} has no run")
    wf = registry.get(run.workflow, run.workflow_version)
    seq = gateway.allocate_message_seqs(thread.pk, 1)[1]
    Message.objects.filter(pk=message.pk).update(seq=seq, status=Message.Status.FINAL)
    with run_transaction(run.pk) as tx:
        tx.event(
            "message.created",
            {"message_id": message.message_id, "role": "user", "seq": seq},
            actor=actor,
        )
        state = initial_state(tx.run, wf.first_step)
        state["message_seq"] = seq
        checkpoints.store(tx.run, None, "start", state)
        tx.schedule_step(wf.first_step, seq=1, actor=actor)
    return run


def promote_next(thread_pk: int, *, actor: str = "inbox") -> Run | None:
    """Start the run of the thread's oldest queued message if no run is in progress;
    returns it, or ``None``."""
    with transaction.atomic():
        thread = Thread.objects.select_for_update().get(pk=thread_pk)
        if active_runs(thread).exists():
            return None
        message = (
            Message.objects.filter(
                thread=thread, status=Message.Status.QUEUED, run__status=RunStatus.PENDING
            )
            .select_related("run")
            .order_by("pk")
            .first()
        )
        if message is None:
            return None
        return _promote(thread, message, actor)


def has_queued(thread_pk: int) -> bool:
    """Whether the thread has a QUEUED message (one read through the thread's seq
    index: a queued message has no seq yet)."""
    # Written out: it runs after every finished run, and building the ORM query cost
    # more CPU than the read.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXISTS (SELECT 1 FROM {Message._meta.db_table} "
            "WHERE thread_id = %s AND seq IS NULL AND status = %s)",
            [thread_pk, Message.Status.QUEUED.value],
        )
        return bool(cursor.fetchone()[0])


def on_run_finished(run_id, thread_id: int, status: str, thread_locked: bool) -> None:
    """Run-finished hook: start the run of the thread's next queued message, if any
    (``promote_next``)."""
    # Most threads have nothing queued. When the finishing commit held the thread row,
    # a message queued concurrently is already visible here, so one unlocked read decides;
    # otherwise it may still be committing, and only promote_next's thread lock waits
    # for it.
    if thread_locked and not has_queued(thread_id):
        return
    promote_next(thread_id, actor="inbox")


def promote_queued(actor: str, batch: int) -> int:
    """Sweep task: threads with a queued message whose in-progress run has ended (the
    process died between that commit and its hook). Returns runs started."""
    threads = list(
        Message.objects.filter(status=Message.Status.QUEUED, run__status=RunStatus.PENDING)
        .values_list("thread_id", flat=True)
        .distinct()[:batch]
    )
    return sum(1 for t in threads if promote_next(t, actor=actor) is not None)


def set_policy(thread_id: str, policy: str, *, owner=None, actor: str = "cli") -> Thread:
    """Set the thread's message policy (``queue`` or ``interrupt``); creates the thread
    if needed. Raises ``ControlError`` ``invalid_thread`` or ``invalid_policy``."""
    check_thread_id(thread_id)
    if policy not in Thread.Policy.values:
        raise ControlError(
            "invalid_policy",
            f"policy must be one of {Thread.Policy.values}",
            {"policy": "must be queue or interrupt"},
        )
    with transaction.atomic():
        thread = _locked_thread(owner, thread_id)
        Thread.objects.filter(pk=thread.pk).update(policy=policy)
    thread.refresh_from_db()
    return thread
