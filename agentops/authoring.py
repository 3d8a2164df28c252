"""Everything a workflow author imports, in one module with stable names.

A workflow module imports from here and nowhere else in AgentOps (the engine's modules
are re-cut as it grows; these names stay)::

    from agentops.authoring import RetryPolicy, StepError, Tool, VerifyAnswer, Workflow, register

    workflow = register(Workflow("refund", version=1, input_fields={"order_id": str}))

    @workflow.step(retry=RetryPolicy(max_attempts=5))
    def check(ctx): ...

docs/first-workflow.md walks through a whole workflow, from an empty file to a run in
the console. The names, by concern:

- **Definition and registration**: ``Workflow`` (its decorators ``step``, ``approval``,
  ``signal``, ``map`` and ``child`` declare steps in order; a map step fans out into
  parallel branches, at most ``MAX_BRANCHES``, and the next step joins them; a child
  step starts child runs of another workflow and waits for them: docs/parallel.md),
  ``register`` (makes a definition runnable: call it once at import time of a module
  listed in ``AGENTOPS_EXTRA_WORKFLOW_MODULES``),
  ``register_lazy`` (declare a name and version whose module is imported on first use),
  ``WorkflowDefinitionError`` (a malformed definition, raised at import time).
- **Tools**: ``Tool`` with its side-effect class (``SIDE_EFFECTS``: ``read``,
  ``idempotent``, ``unsafe``), ``ToolCall`` (what a tool receives besides its
  arguments: the idempotency key), ``VerifyAnswer`` (what an ``unsafe`` tool's
  ``verify`` hook found out).
- **Retries and errors**: ``RetryPolicy``, ``DEFAULT_RETRY``, ``RETRYABLE_CODES`` and
  ``StepError`` (what a step or tool raises to fail an attempt with a code).
- **Durations**: ``MAX_SECONDS``, the longest sleep, timeout or expiry accepted.
- **Agents** (loaded on first use, so a process without agents never imports Pydantic
  AI): ``register_agent``, ``AgentTool``, ``current_call``, ``prompt_and_results``.
- **What a step receives**: ``StepContext`` (``ctx``: its input, the outputs of earlier
  steps, ``goto``, the durable timers ``sleep`` and ``sleep_until``, tool and model
  calls through the operation ledger, messages, artifacts, ``safe_point``) and
  ``CompensationContext`` (what a ``compensate(ctx, output)`` function receives). Both
  are typing protocols: the engine builds the objects; annotate with them.

Waits: an approval is ``@workflow.approval``, a signal ``@workflow.signal``, child runs
of another workflow ``@workflow.child`` (docs/parallel.md), a timer
``ctx.sleep(seconds)`` or ``ctx.sleep_until(instant)`` (the run holds no lease and no
worker while it waits, and the wait survives restarts).
"""

from datetime import datetime
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol

from runs.engine.durations import MAX_SECONDS
from runs.engine.effects.retry import DEFAULT_RETRY, RETRYABLE_CODES, RetryPolicy
from runs.engine.errors import StepError
from runs.tools import SIDE_EFFECTS, Tool, ToolCall, VerifyAnswer
from runs.workflows.definition import MAX_BRANCHES, Workflow, WorkflowDefinitionError
from runs.workflows.registry import register, register_lazy

if TYPE_CHECKING:
    from runs.agents.durability import AgentTool, current_call
    from runs.agents.messages import prompt_and_results
    from runs.agents.workflow import register_agent

# Child runs: their decorators and ctx methods are added to this module and to
# ``StepContext`` below as they land.


class StepContext(Protocol):
    """What a step function ``fn(ctx)`` receives (one attempt of one step).

    ``input``: the run's input dict. ``outputs``: ``{step name: output}`` of the steps
    completed before this one. ``state``: the latest checkpoint's state dict. ``run``
    and ``step``: the stored run and step (read them; the engine writes them).
    ``attempt``: this attempt's number, from 1. ``item`` and ``position``: in a branch
    of a map step, its item and its 0-based place in the list (``None`` elsewhere).
    """

    input: dict[str, Any]
    outputs: dict[str, Any]
    state: dict[str, Any]
    run: Any
    step: Any
    attempt: int
    item: Any
    position: int | None

    def goto(self, step_name: str | None) -> None:
        """Continue with ``step_name`` after this step (``None`` ends the run); raises
        ``WorkflowDefinitionError`` for a step the workflow does not declare."""

    def sleep(self, seconds: float) -> None:
        """Hold the next step back for ``seconds`` after this step commits (a durable
        timer); raises ``StepError`` (``INVALID_DURATION``) outside 0..``MAX_SECONDS``."""

    def sleep_until(self, instant: datetime) -> None:
        """Hold the next step back until the aware datetime ``instant``; raises
        ``StepError`` (``INVALID_DURATION``) for a naive one or one too far ahead."""

    def safe_point(self) -> None:
        """Call in long loops: stops the step (raising) when its lease is lost or the run
        is asked to cancel."""

    def call_tool(self, tool: Tool, arguments: dict[str, Any], *, action: str | None = None):
        """Call ``tool`` through the operation ledger and return its result; a result
        recorded by an earlier attempt is reused, an unsafe call left unfinished is
        verified first. ``action`` tells apart several calls of one tool in a step."""

    def call_model(
        self, messages: list[dict[str, Any]], tools: list | None = None, *, model: str | None = None
    ):
        """Ask the model through the ledger (a recorded response is reused); returns a
        ``ModelReply`` with ``content`` and ``tool_calls``."""

    def stream_model(
        self, messages: list[dict[str, Any]], *, message_id: str, model: str | None = None
    ):
        """Ask the model and stream its reply into the draft ``message_id``."""

    def messages(self) -> list[dict[str, Any]]:
        """The model input for this step: instructions, summary, history, this run's tool
        calls and results, then the messages this step added."""

    def add_message(
        self,
        role: str,
        content: str = "",
        *,
        tool_calls: list | None = None,
        tool_call_id: str | None = None,
    ) -> str:
        """Stage a message of the run's thread, committed with the step; returns its id."""

    def begin_message(self, role: str = "assistant") -> str:
        """Commit an empty draft message now (for streaming); returns its id."""

    def finish_message(self, message_id: str, content: str) -> None:
        """Stage the draft ``message_id`` as final with ``content``."""

    def tool_call_id(self, index: int = 0) -> str:
        """A tool-call id that is the same on every attempt of this step."""

    def summary_due(self) -> Any:
        """The summary of older history the run should make before calling the model
        (a plan for ``add_summary``), or ``None``."""

    def add_summary(self, plan: Any, content: str) -> None:
        """Stage the summary ``content`` for ``plan``, committed with the step."""

    def save_artifact(
        self,
        name: str,
        data: bytes | str,
        *,
        kind: str = "file",
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        """Store artifact ``name`` and reference it from this step's checkpoint."""

    def read_artifact(self, name: str) -> bytes:
        """The bytes of the run's newest artifact ``name``, checksum verified; raises
        ``StepError`` (``ARTIFACT_NOT_FOUND``) when there is none."""


class CompensationContext(Protocol):
    """What a ``compensate(ctx, output)`` function receives when a run that completed
    the step later fails or is cancelled: ``input`` (the run's input), ``output`` (the
    step's output), ``run`` and ``step`` (stored rows, read only)."""

    input: dict[str, Any]
    output: Any
    run: Any
    step: Any

    def call_tool(self, tool: Tool, arguments: dict[str, Any], *, action: str | None = None):
        """Call ``tool`` through the ledger, once per compensation and ``action``."""


#: Names loaded on first use: ``{name: module}``.
_LAZY = {
    "register_agent": "runs.agents.workflow",
    "AgentTool": "runs.agents.durability",
    "current_call": "runs.agents.durability",
    "prompt_and_results": "runs.agents.messages",
}


def __getattr__(name: str) -> Any:
    """The agent names (``_LAZY``), imported when first asked for."""
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'agentops.authoring' has no attribute {name!r}") from None
    return getattr(import_module(module), name)


__all__ = [
    "DEFAULT_RETRY",
    "MAX_BRANCHES",
    "MAX_SECONDS",
    "RETRYABLE_CODES",
    "SIDE_EFFECTS",
    "AgentTool",
    "CompensationContext",
    "RetryPolicy",
    "StepContext",
    "StepError",
    "Tool",
    "ToolCall",
    "VerifyAnswer",
    "Workflow",
    "WorkflowDefinitionError",
    "current_call",
    "prompt_and_results",
    "register",
    "register_agent",
    "register_lazy",
]
