"""What a step function receives: the run, its input, prior messages and outputs, the
budget, and helpers for model calls, tool calls and safe points."""

import threading
import time
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from runs.engine import durations, hooks
from runs.engine.data import drafts
from runs.engine.data.artifacts import read_artifact, write_artifact
from runs.engine.data.model_input import assemble_context, summary_due, token_counter
from runs.engine.effects import budget as budget_mod
from runs.engine.effects import ledger, model_calls
from runs.engine.effects.calls import CallTimedOut, call_with_timeout
from runs.engine.errors import CancelRequested, LeaseLost, OutcomeUnknown, StepError
from runs.engine.state.gateway import record_event
from runs.models import Artifact, Operation, Run, Step
from runs.tools import Tool, ToolCall


class StepContext:
    """Context of one attempt of one step.

    ``input``: the run's input (after any resume patch). ``outputs``: ``{step name:
    output}`` of the steps completed before this one (from the latest checkpoint).
    ``state``: the latest checkpoint's whole state dict (``checkpoint_id``: its id).
    """

    def __init__(
        self,
        *,
        run: Run,
        step: Step,
        attempt: int,
        worker_id: str,
        workflow,
        step_def,
        state: dict[str, Any],
        checkpoint_id: int | None = None,
    ):
        self.run = run
        self.step = step
        self.attempt = attempt
        self.worker_id = worker_id
        self.workflow = workflow
        self.step_def = step_def
        #: The checkpoint the step starts from, as stored (``checkpoint_state``) and its
        #: id: the next checkpoint stores what changed since it. ``state`` is the
        #: working copy the step may extend (artifact references).
        self.checkpoint_state = state
        self.checkpoint_id = checkpoint_id
        self.state = dict(state)
        self.input: dict[str, Any] = state.get("input", run.input)
        self.outputs: dict[str, Any] = dict(state.get("outputs", {}))
        #: A branch of a map step: its position (0-based) in the fanned-out list and
        #: its item; ``None`` for both in every other step.
        self.position: int | None = step.position
        self.item: Any = step.input.get("item") if step.position is not None else None
        self.new_messages: list[dict[str, Any]] = []
        self.new_summaries: list[dict[str, Any]] = []
        #: Drafts begun by this attempt: ``{message_id: role}``.
        self._draft_roles: dict[str, str] = {}
        self.next_step: str | None = None
        self.goto_set = False
        #: A durable timer for the next step: seconds from the commit (database clock)
        #: or an aware instant; ``None``: the next step is due at once.
        self.sleep_seconds: float | None = None
        self.wake_at: datetime | None = None
        #: Model requests made by this attempt so far (the next request's ordinal).
        self.model_requests = 0
        #: Tool calls made by this attempt so far, by base key.
        self.call_positions = ledger.CallPositions()
        #: Set by the heartbeat thread; read at safe points.
        self.lease_lost = threading.Event()
        self.cancel_requested = threading.Event()
        #: This process's clock (monotonic seconds) by which the lease must have been
        #: renewed again: the claim gave a full lease, each renewal extends it.
        self._lease_seconds = float(settings.AGENTOPS_LEASE_SECONDS)
        self._renew_by = time.monotonic() + self._lease_seconds

    # -- flow -----------------------------------------------------------------------
    def goto(self, step_name: str | None) -> None:
        """Continue with ``step_name`` after this step (``None`` ends the run)."""
        if step_name is not None:
            self.workflow.get(step_name)
        self.next_step = step_name
        self.goto_set = True

    def sleep(self, seconds: float) -> None:
        """Hold the next step back for ``seconds`` after this step commits (a durable
        timer: the run keeps no lease and no worker while it sleeps, and survives
        restarts). Raises ``InvalidDuration`` (a ``StepError``, never retried) unless
        ``seconds`` is a number from 0 to ``durations.MAX_SECONDS``."""
        self.sleep_seconds = durations.check_seconds(seconds, "sleep")
        self.wake_at = None

    def sleep_until(self, instant: datetime) -> None:
        """Hold the next step back until ``instant`` (an aware datetime; a past one
        means at once). Raises ``InvalidDuration`` (a ``StepError``, never retried) for a
        naive datetime or one more than ``durations.MAX_SECONDS`` ahead."""
        self.wake_at = durations.check_instant(instant, "sleep_until", datetime.now(UTC))
        self.sleep_seconds = None

    def lease_renewed(self) -> None:
        """The heartbeat renewed this attempt's lease (called from its thread)."""
        self._renew_by = time.monotonic() + self._lease_seconds

    def safe_point(self) -> None:
        """Call in long loops: raises ``LeaseLost`` or ``CancelRequested`` when the
        heartbeat found the lease gone or the run cancel-requested.

        Fails closed: when no renewal succeeded for two thirds of a lease (the database
        refused or could not be reached), the lease is treated as lost before it can run
        out, so no side effect is made on a lease another worker may take."""
        if time.monotonic() > self._renew_by - self._lease_seconds / 3:
            self.lease_lost.set()
        if self.lease_lost.is_set():
            raise LeaseLost(f"step {self.step.name} attempt {self.attempt} lost its lease")
        if self.cancel_requested.is_set():
            raise CancelRequested(f"run {self.run.id} cancel requested")

    def check_stopped(self) -> None:
        """Raise ``LeaseLost`` / ``CancelRequested`` when the heartbeat found the lease
        gone or the run cancel-requested. Unlike ``safe_point`` it does not treat a late
        renewal as a lost lease: for waiting on a model's stream and writing its text to
        a draft, which makes no side effect outside and is fenced by the attempt in the
        database, so a worker busy elsewhere must not lose the step for it."""
        if self.lease_lost.is_set():
            raise LeaseLost(f"step {self.step.name} attempt {self.attempt} lost its lease")
        if self.cancel_requested.is_set():
            raise CancelRequested(f"run {self.run.id} cancel requested")

    # -- messages -------------------------------------------------------------------
    def messages(self) -> list[dict[str, Any]]:
        """The model input for this step (``runs.engine.data.model_input``: system
        instruction, summary, history, this run's tool calls and results, all from
        stored records), then the messages this step added so far, as ``{role, content,
        tool_calls, tool_call_id}`` dicts (stored ones also carry ``id``)."""
        return self.context().model_input + [
            {k: v for k, v in m.items() if k != "draft"} for m in self.new_messages
        ]

    def context(self):
        """The assembled context (``AssembledContext``) for this step, from stored records."""
        return assemble_context(self.run, step=self.step.name)

    def summary_due(self):
        """The summary (``SummaryPlan``) this run should make before calling the model,
        or ``None`` (``model_input.summary_due``)."""
        return summary_due(self.run)

    def add_summary(self, plan, content: str) -> None:
        """Stage a Summary for ``plan`` (``context_assembly.SummaryPlan``), committed with
        the step's result; a re-run of the step after a crash stages it again. The
        ``summary_ready`` crash point (``runs start --crash-at``) is here: the summary is
        computed, not yet committed."""
        hooks.reached(hooks.SUMMARY_READY, self.run, self.step)

        self.new_summaries.append(
            {
                "first_seq": 1,
                "last_seq": plan.last_seq,
                "content": content,
                "tokens": token_counter()(content),
                "covered_tokens": plan.covered_tokens,
            }
        )

    def tool_call_id(self, index: int = 0) -> str:
        """A tool-call id that is the same on every attempt of this step."""
        return f"call_{self.run.pk.hex[:8]}_{self.step.pk}_{index}"

    def add_message(
        self,
        role: str,
        content: str = "",
        *,
        tool_calls: list | None = None,
        tool_call_id: str | None = None,
    ) -> str:
        """Stage a message, committed with the step's result; returns its ``message_id``
        (stable across attempts of this step)."""
        message_id = f"msg_{self.run.pk.hex[:8]}_{self.step.pk}_{len(self.new_messages)}"
        self.new_messages.append(
            {
                "id": message_id,
                "role": role,
                "content": content,
                "tool_calls": tool_calls or [],
                "tool_call_id": tool_call_id,
            }
        )
        return message_id

    def begin_message(self, role: str = "assistant") -> str:
        """Commit an empty draft message now and return its ``message_id``, before any
        generation starts (``runs.engine.data.drafts``). A retry of this step gets a new id
        and supersedes this draft. Finish it with ``finish_message``."""
        self.safe_point()
        message_id = drafts.begin(
            run_id=self.run.pk,
            thread_id=self.run.thread_id,
            step=self.step,
            attempt=self.attempt,
            role=role,
            index=len(self.new_messages) + len(self._draft_roles),
            actor=self.worker_id,
        )
        self._draft_roles[message_id] = role
        return message_id

    def finish_message(
        self,
        message_id: str,
        content: str,
        *,
        tool_calls: list | None = None,
        tool_call_id: str | None = None,
    ) -> None:
        """Stage the draft ``message_id`` as final with ``content`` (and, for an agent's
        messages, its ``tool_calls`` or the ``tool_call_id`` it answers); it becomes
        final only with the step's fenced commit."""
        self.new_messages.append(
            {
                "id": message_id,
                "role": self._draft_roles[message_id],
                "content": content,
                "tool_calls": tool_calls or [],
                "tool_call_id": tool_call_id,
                "draft": True,
            }
        )

    # -- model and tools ------------------------------------------------------------
    def stream_model(
        self, messages: list[dict[str, Any]], *, message_id: str, model: str | None = None
    ):
        """Ask the model (``model``, else the step's, workflow's or ``AGENTOPS_MODEL``) for
        a text reply through the ledger (``runs.engine.effects.model_calls``) and stream
        it into the draft ``message_id`` piece by piece (one ``message.delta`` event
        each, with its character offset). Returns the ``ModelReply``. Raises
        ``BudgetExhausted``, ``LeaseLost``, ``CancelRequested``, ``StepError``
        (``TIMEOUT`` when the whole reply takes longer than the step's ``timeout``:
        the draft is then abandoned)."""

        streamed = {"content": ""}

        def abandon(reason: str) -> None:
            # Nothing will finish this draft: tell clients to drop it.
            drafts.abandon(
                run_id=self.run.pk,
                step_id=self.step.pk,
                message_id=message_id,
                attempt=self.attempt,
                reason=reason,
                actor=self.worker_id,
            )

        def on_piece(offset: int, piece: str) -> None:
            streamed["content"] = streamed["content"][:offset] + piece
            try:
                self.check_stopped()
            except CancelRequested:
                abandon("cancel requested")
                raise
            drafts.delta(
                run_id=self.run.pk,
                step=self.step,
                attempt=self.attempt,
                message_id=message_id,
                offset=offset,
                text=piece,
                content=streamed["content"],
                actor=self.worker_id,
            )

        try:
            return model_calls.stream_model(self, messages, message_id, model, on_piece)
        except StepError as exc:
            if exc.code == "TIMEOUT":
                abandon(f"the reply passed the step's timeout of {self.step_def.timeout}s")
            raise

    def call_model(
        self,
        messages: list[dict[str, Any]],
        tools: list | None = None,
        *,
        model: str | None = None,
    ):
        """Ask the model (``model``, else the step's, workflow's or ``AGENTOPS_MODEL``)
        through the ledger (``runs.engine.effects.model_calls``): a response recorded by
        an earlier attempt of this step is reused. ``tools``: ``Tool`` objects or names.
        Returns a ``ModelReply``; raises ``BudgetExhausted``, ``StepError`` (``TIMEOUT``
        past the step's ``timeout``, or a classified provider error)."""
        return model_calls.call_model(self, messages, tools, model)

    def call_tool(self, tool: Tool, arguments: dict[str, Any], *, action: str | None = None):
        """Call ``tool`` through the operation ledger; returns its result.

        ``action`` names the business action within the step (default: the tool name);
        with the call's position among the step's calls of that action it makes the
        idempotency key, so calling one tool three times makes three operations. A
        result already recorded as SUCCEEDED for the same tool and arguments is reused
        without calling the tool; an earlier attempt's unfinished unsafe call is verified
        first (see ``perform_call``). Raises ``LeaseLost``, ``BudgetExhausted``,
        ``StepError`` (``TIMEOUT`` past the timeout), ``NonDeterminism`` (the call was
        recorded with another tool or other arguments) and ``OutcomeUnknown``.
        """
        action = action or tool.name
        key = ledger.idempotency_key(
            self.run.pk, self.step.generation, ledger.step_scope(self.step), action
        )
        return self.call_tool_keyed(
            tool, arguments, key=key, action=action, timeout=tool.timeout or self.step_def.timeout
        )

    def call_tool_keyed(
        self,
        tool: Tool,
        arguments: dict[str, Any],
        *,
        key: str,
        action: str,
        timeout,
        position: int | None = None,
    ):
        """``call_tool`` under a base idempotency ``key`` the caller made (an agent's
        tool call is keyed by its tool-call id), after a safe point; the call's position
        is appended (``ledger.positioned``): ``position`` when the caller knows it (calls
        made concurrently, whose order of arrival differs between executions), else its
        place among this execution's calls under ``key``. ``timeout`` in seconds or
        ``None``. Returns the result; raises what ``call_tool`` raises."""
        self.safe_point()
        if position is None:
            key = self.call_positions.key_for(key)
        else:
            key = ledger.positioned(key, position)
        return perform_call(
            run=self.run,
            step=self.step,
            attempt=self.attempt,
            actor=self.worker_id,
            tool=tool,
            arguments=arguments,
            key=key,
            action=action,
            budget=self.run.budget,
            timeout=timeout,
        )

    # -- artifacts (runs.engine.data.artifacts) ------------------------------------------
    def save_artifact(
        self,
        name: str,
        data: bytes | str,
        *,
        kind: str = "file",
        metadata: dict[str, Any] | None = None,
    ):
        """Write artifact ``name`` (file first, then the row) and reference it from the
        checkpoint this step commits. Returns the ``Artifact``; raises ``LeaseLost``, or
        ``StepError("TIMEOUT")`` when the storage takes longer than the step's
        ``timeout``."""
        self.safe_point()
        artifact = write_artifact(
            run=self.run,
            step=self.step,
            attempt=self.attempt,
            name=name,
            data=data,
            kind=kind,
            metadata=metadata,
            timeout=self.step_def.timeout,
        )
        # A new dict, not an in-place append: the checkpoint state read at claim time
        # stays as it was if this attempt never commits.
        self.state = {**self.state, "artifacts": [*self.state.get("artifacts", []), artifact.pk]}
        return artifact

    def read_artifact(self, name: str) -> bytes:
        """The bytes of the newest artifact ``name`` referenced by this run's checkpoint
        (or saved by this attempt), checksum verified. Raises ``ArtifactInvalid`` when the
        file is missing or changed (the executor pauses the run for a takeover),
        ``StepError("ARTIFACT_NOT_FOUND")`` when no such artifact is referenced, or
        ``StepError("TIMEOUT")`` when the storage takes longer than the step's
        ``timeout``."""
        ids = self.state.get("artifacts", [])
        artifact = Artifact.objects.filter(pk__in=ids, name=name).order_by("-pk").first()
        if artifact is None:
            raise StepError("ARTIFACT_NOT_FOUND", f"no artifact {name!r} in this run's checkpoint")
        return read_artifact(artifact, timeout=self.step_def.timeout)


def perform_call(
    *,
    run: Run,
    step: Step,
    attempt: int | None,
    actor: str,
    tool: Tool,
    arguments: dict[str, Any],
    key: str,
    action: str,
    budget: dict,
    timeout: float | None,
):
    """One outside call through the ledger, in this order:

    0. A row for ``key`` that may have taken effect (any status but FAILED) answers
       only the request it recorded: another tool or other arguments raise
       ``NonDeterminism`` (the step asks differently than when it made the call), unless
       the row was carried over from before a resume or a replay: then it is dropped,
       ``operation.reuse_declined``, and the call is made.
    1. A SUCCEEDED row for ``key``: return its result, no call.
    2. An INTENT/UNKNOWN row left by an earlier attempt of an ``unsafe`` tool: ask
       ``verify``. Done: record and return its result. Cannot tell: raise
       ``OutcomeUnknown``. Not done: go on. (``read`` and ``idempotent`` tools simply
       call again, with the same key.)
    3. Charge one tool call to ``budget`` (``BudgetExhausted`` before any intent is
       written, so nothing is left dangling), record the INTENT (fenced by ``attempt``),
       call with ``timeout``, record the result.

    A ``StepError`` from the tool means the effect did not happen: the row becomes
    FAILED and the error propagates. A timeout, or any other exception, of an ``unsafe``
    call asks ``verify`` (``_settle_after_send``): done is the result, not done a
    retryable failure (an ``OutcomeUnknown`` after a timeout: the call may still land),
    cannot tell an ``OutcomeUnknown``; a timeout of other tools is ``StepError("TIMEOUT")``.
    """
    info = ToolCall(run_id=str(run.pk), idempotency_key=key, attempt=attempt or 0)
    op = ledger.find(key)
    if op is not None and ledger.decline_reuse(op, tool.name, arguments):
        # A result carried over from before a resume or a replay, for other arguments.
        record_event(
            run.pk,
            "operation.reuse_declined",
            {"idempotency_key": key, "recorded": op.arguments, "now": arguments},
            step_id=step.pk if step else None,
            actor=actor,
        )
        op = None
    if op is not None and op.status != Operation.Status.FAILED:
        ledger.check_same_request(op, tool.name, arguments, action=action)
    if op is not None:
        if op.status == Operation.Status.SUCCEEDED:
            return op.result
        if op.status == Operation.Status.COMPENSATED:
            raise StepError("OPERATION_COMPENSATED", f"operation {key} was compensated")
        if (
            op.status in (Operation.Status.INTENT, Operation.Status.UNKNOWN)
            and tool.side_effect == "unsafe"
        ):
            answer = ledger.verify(tool, op, info, timeout=timeout)
            ledger.record_verified(op, answer, step_id=step.pk if step else None, actor=actor)
            if answer.status == "done":
                ledger.record_result(op, answer.result)
                return answer.result
            if answer.status == "cannot_tell":
                raise OutcomeUnknown(
                    op.pk,
                    f"{tool.name}: an earlier attempt may have made "
                    "this call and verify cannot tell",
                    answer.evidence,
                )
            ledger.record_result(
                op,
                {"verified": "not_done", "evidence": answer.evidence},
                status=Operation.Status.FAILED,
            )
    budget_mod.charge(run.pk, budget, parent_run_id=run.parent_run_id, tool_calls=1)
    op = ledger.record_intent(
        run_id=run.pk,
        step_id=step.pk if step else None,
        attempt=attempt,
        key=key,
        tool=tool,
        arguments=arguments,
    )
    if op.status == Operation.Status.SUCCEEDED:
        # Recorded by a concurrent attempt between the look-up and the intent.
        ledger.check_same_request(op, tool.name, arguments, action=action)
        return op.result
    after_call = hooks.before_outside_call(run, step.pk if step else None, tool, action)
    try:
        result = call_with_timeout(
            lambda: ledger.call(tool, arguments, info),
            timeout,
            on_late=lambda late: ledger.record_late_result(op.pk, late),
        )
    except CallTimedOut as exc:
        if tool.side_effect == "unsafe":
            return _settle_after_send(
                run, step, actor, tool, op, info, exc, timeout=timeout, in_flight=True
            )
        raise StepError("TIMEOUT", f"{tool.name}: {exc}") from exc
    except StepError as exc:
        ledger.record_failure(op, exc)
        raise
    except Exception as exc:  # noqa: BLE001 - sent, then no definite "not done": settle it
        return _settle_after_send(run, step, actor, tool, op, info, exc, timeout=timeout)
    after_call()
    ledger.record_result(op, result)
    return result


def _settle_after_send(
    run: Run,
    step: Step | None,
    actor: str,
    tool: Tool,
    op,
    info,
    exc: Exception,
    *,
    timeout: float | None,
    in_flight: bool = False,
):
    """The request may have reached the outside world, then the call failed without a
    definite "not done" (an HTTP 500 after the effect, an unreadable 200, a dropped
    connection, or a timeout: ``in_flight``, the abandoned call may still land). For an
    ``unsafe`` tool that is an unknown outcome, settled the way a crash is: ``verify``
    now (an ``operation.verified`` event with ``after``: the failure); done: the result,
    recorded; not done: the row FAILED and a retryable ``StepError``, except while the
    call is in flight (it may still act: ``OutcomeUnknown``, and a late result is
    recorded when it comes); cannot tell: ``OutcomeUnknown`` (a human decides). Read and
    idempotent tools are simply retried under the same key (``DEPENDENCY_UNAVAILABLE``).
    ``verify`` is held to ``timeout`` seconds, the call's own (past it: cannot tell)."""
    cause = f"{tool.name}: {type(exc).__name__}: {exc}"[:2000]
    if tool.side_effect != "unsafe":
        raise StepError("DEPENDENCY_UNAVAILABLE", cause) from exc
    answer = ledger.verify(tool, op, info, timeout=timeout)
    ledger.record_verified(op, answer, step_id=step.pk if step else None, actor=actor, after=cause)
    if answer.status == "done":
        ledger.record_result(op, answer.result)
        return answer.result
    if answer.status == "not_done" and in_flight:
        raise OutcomeUnknown(
            op.pk,
            f"{cause}; verify finds no effect yet, but the call is still in flight and may "
            "still take effect",
            answer.evidence,
        ) from exc
    if answer.status == "not_done":
        ledger.record_result(
            op,
            {"verified": "not_done", "evidence": answer.evidence, "after": cause},
            status=Operation.Status.FAILED,
        )
        raise StepError("DEPENDENCY_UNAVAILABLE", cause) from exc
    raise OutcomeUnknown(
        op.pk, f"{cause}; the call may have taken effect and verify cannot tell", answer.evidence
    ) from exc
