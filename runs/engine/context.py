"""What a step function receives: the run, its input, prior messages and outputs, the
budget, and helpers for model calls, tool calls and safe points."""

import threading
from typing import Any

from runs.engine import budget as budget_mod
from runs.engine import drafts, ledger
from runs.engine.errors import CancelRequested, LeaseLost, StepError
from runs.models import Message, Operation, Run, Step
from runs.sim import model as sim_model
from runs.tools import Tool, ToolCall


class StepContext:
    """Context of one attempt of one step.

    ``input``: the run's input (after any resume patch). ``outputs``: ``{step name:
    output}`` of the steps completed before this one (from the latest checkpoint).
    ``state``: the latest checkpoint's whole state dict.
    """

    def __init__(self, *, run: Run, step: Step, attempt: int, worker_id: str,
                 workflow, step_def, state: dict[str, Any]):
        self.run = run
        self.step = step
        self.attempt = attempt
        self.worker_id = worker_id
        self.workflow = workflow
        self.step_def = step_def
        self.state = state
        self.input: dict[str, Any] = state.get("input", run.input)
        self.outputs: dict[str, Any] = dict(state.get("outputs", {}))
        self.new_messages: list[dict[str, Any]] = []
        #: Drafts begun by this attempt: ``{message_id: role}``.
        self._draft_roles: dict[str, str] = {}
        self.next_step: str | None = None
        self.goto_set = False
        #: Set by the heartbeat thread; read at safe points.
        self.lease_lost = threading.Event()
        self.cancel_requested = threading.Event()

    # -- flow -----------------------------------------------------------------------
    def goto(self, step_name: str | None) -> None:
        """Continue with ``step_name`` after this step (``None`` ends the run)."""
        if step_name is not None:
            self.workflow.get(step_name)
        self.next_step = step_name
        self.goto_set = True

    def safe_point(self) -> None:
        """Call in long loops: raises ``LeaseLost`` or ``CancelRequested`` when the
        heartbeat found the lease gone or the run cancel-requested."""
        if self.lease_lost.is_set():
            raise LeaseLost(f"step {self.step.name} attempt {self.attempt} lost its lease")
        if self.cancel_requested.is_set():
            raise CancelRequested(f"run {self.run.id} cancel requested")

    # -- messages -------------------------------------------------------------------
    def messages(self) -> list[dict[str, Any]]:
        """The thread's final messages in order, then those this step added so far, as
        ``{id, role, content, tool_calls, tool_call_id}`` dicts."""
        stored = [
            m.as_dict()
            for m in Message.objects.filter(
                thread_id=self.run.thread_id, status=Message.Status.FINAL
            ).order_by("seq")
        ]
        return stored + [{k: v for k, v in m.items() if k != "draft"} for m in self.new_messages]

    def tool_call_id(self, index: int = 0) -> str:
        """A tool-call id that is the same on every attempt of this step."""
        return f"call_{self.run.pk.hex[:8]}_{self.step.pk}_{index}"

    def add_message(self, role: str, content: str = "", *, tool_calls: list | None = None,
                    tool_call_id: str | None = None) -> str:
        """Stage a message, committed with the step's result; returns its ``message_id``
        (stable across attempts of this step)."""
        message_id = f"msg_{self.run.pk.hex[:8]}_{self.step.pk}_{len(self.new_messages)}"
        self.new_messages.append({
            "id": message_id, "role": role, "content": content,
            "tool_calls": tool_calls or [], "tool_call_id": tool_call_id,
        })
        return message_id

    def begin_message(self, role: str = "assistant") -> str:
        """Commit an empty draft message now and return its ``message_id``, before any
        generation starts (``runs.engine.drafts``). A retry of this step gets a new id
        and supersedes this draft. Finish it with ``finish_message``."""
        self.safe_point()
        message_id = drafts.begin(run_id=self.run.pk, thread_id=self.run.thread_id,
                                  step=self.step, attempt=self.attempt, role=role,
                                  index=len(self.new_messages) + len(self._draft_roles),
                                  actor=self.worker_id)
        self._draft_roles[message_id] = role
        return message_id

    def finish_message(self, message_id: str, content: str) -> None:
        """Stage the draft ``message_id`` as final with ``content``; it becomes final
        only with the step's fenced commit."""
        self.new_messages.append({"id": message_id, "role": self._draft_roles[message_id],
                                  "content": content,
                                  "tool_calls": [], "tool_call_id": None, "draft": True})

    # -- model and tools ------------------------------------------------------------
    def stream_model(self, messages: list[dict[str, Any]], *, message_id: str):
        """Ask the (simulated) model for a text reply and stream it into the draft
        ``message_id`` piece by piece (one ``message.delta`` event each, with its
        character offset); charges one model call first. Returns the whole reply as a
        ``ModelReply``. Raises ``BudgetExhausted``, ``LeaseLost``, ``CancelRequested``."""
        self.safe_point()
        budget_mod.charge(self.run.pk, self.run.budget, model_calls=1,
                          cost_usd=sim_model.COST_PER_CALL_USD)
        content = ""
        for piece in sim_model.stream(messages):
            self.safe_point()
            drafts.delta(run_id=self.run.pk, step=self.step, attempt=self.attempt,
                         message_id=message_id, offset=len(content), text=piece,
                         content=content + piece, actor=self.worker_id)
            content += piece
        return sim_model.ModelReply(content=content)

    def call_model(self, messages: list[dict[str, Any]], tools: list[str] | None = None):
        """Ask the (simulated) model; charges one model call and its cost to the budget
        first. Returns ``runs.sim.model.ModelReply``; raises ``BudgetExhausted``."""
        self.safe_point()
        budget_mod.charge(self.run.pk, self.run.budget, model_calls=1,
                          cost_usd=sim_model.COST_PER_CALL_USD)
        return sim_model.complete(messages, tools or [])

    def call_tool(self, tool: Tool, arguments: dict[str, Any], *, action: str | None = None):
        """Call ``tool`` through the operation ledger; returns its result.

        ``action`` names the business action within the step (default: the tool name),
        which makes the idempotency key. A result already recorded as SUCCEEDED is reused
        without calling the tool. Raises ``LeaseLost``, ``BudgetExhausted``, ``StepError``.
        """
        self.safe_point()
        key = ledger.idempotency_key(self.run.pk, self.step.generation, self.step.name,
                                     action or tool.name)
        op = ledger.record_intent(run_id=self.run.pk, step_id=self.step.pk,
                                  attempt=self.attempt, key=key, tool=tool, arguments=arguments)
        if op.status == Operation.Status.SUCCEEDED:
            return op.result
        if op.status != Operation.Status.INTENT:
            raise StepError("OPERATION_" + op.status, f"operation {key} is {op.status}")
        budget_mod.charge(self.run.pk, self.run.budget, tool_calls=1)
        result = ledger.call(tool, arguments,
                             ToolCall(run_id=str(self.run.pk), idempotency_key=key,
                                      attempt=self.attempt))
        ledger.record_result(op, result)
        return result
