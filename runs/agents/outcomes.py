"""What a tool call of an agent run ended with, as the JSON the ledger records.

Pydantic AI's tools steer the agent with exceptions: ``ModelRetry`` (a retry prompt for
the model), ``ToolFailed`` (a failure the model reads), ``ApprovalRequired`` and
``CallDeferred`` (the call waits for a person or an outside system). Each is an outcome
of the call, not an error of the step: ``capture`` records it as data, and ``release``
raises it again, so a step re-executed after a crash hands Pydantic AI the same
exception without running the tool again.

Any other exception is the tool's own error (``tool_error``): a transient one (a
connection or OS error, a timeout) propagates as it is, for the ledger to retry or
verify by the tool's side effect; anything else becomes ``StepError("TOOL_ERROR")`` with
a takeover, since running the same code again fails the same way.

Recorded shapes: ``{"agentops_outcome": "model_retry" | "tool_failed", "message"}``,
``{"agentops_outcome": "approval_required" | "call_deferred", "metadata", "kind"}``,
``{"agentops_outcome": "retries_exceeded", "message"}``; a plain result is recorded as
it is, unless it is a dict with the ``agentops_outcome`` key itself (then
``{"agentops_outcome": "return", "value": result}``), so no result is read as an outcome.
"""

from collections.abc import Awaitable
from typing import Any

from runs.agents.bridge import CONTROL_EXCEPTIONS
from runs.engine.errors import StepError

OUTCOME = "agentops_outcome"

#: Errors of the outside world a retry may get past (a read is retried, an unsafe call
#: verified): the ledger handles them by the tool's side effect.
TRANSIENT = (OSError, TimeoutError, ConnectionError)


async def capture(tool_name: str, call: Awaitable[Any]) -> Any:
    """Await ``call`` (the tool's execution through Pydantic AI's handler) and return its
    result as recorded JSON: the result, or the control-flow outcome it raised. Raises
    ``StepError("TOOL_ERROR", takeover=True)`` for the tool's own error, and lets the
    engine's control exceptions and transient errors through."""
    from pydantic_ai.exceptions import (
        ApprovalRequired,
        CallDeferred,
        ToolFailedError,
        ToolRetryError,
        UnexpectedModelBehavior,
    )

    try:
        result = await call
    except ToolRetryError as exc:
        cause = exc.__cause__
        message = getattr(cause, "message", None) or str(exc)
        return {OUTCOME: "model_retry", "message": str(message)}
    except ToolFailedError as exc:
        cause = exc.__cause__
        return {OUTCOME: "tool_failed", "message": str(getattr(cause, "message", None) or exc)}
    except ApprovalRequired as exc:
        return {OUTCOME: "approval_required", "metadata": _jsonable(exc.metadata)}
    except CallDeferred as exc:
        return {OUTCOME: "call_deferred", "metadata": _jsonable(exc.metadata), "kind": exc.kind}
    except UnexpectedModelBehavior as exc:
        # The tool asked for one retry more than it allows: Pydantic AI ends the agent run.
        return {OUTCOME: "retries_exceeded", "message": exc.message}
    except CONTROL_EXCEPTIONS:
        raise
    except TRANSIENT:
        raise
    except Exception as exc:  # noqa: BLE001 - the tool's own error, classified here
        raise StepError(
            "TOOL_ERROR", f"{tool_name} raised {type(exc).__name__}: {exc}"[:2000], takeover=True
        ) from exc
    if isinstance(result, dict) and OUTCOME in result:
        return {OUTCOME: "return", "value": result}
    return result


def release(recorded: Any) -> Any:
    """The tool's result from what ``capture`` recorded, or raise the recorded outcome as
    the exception Pydantic AI expects from the tool."""
    from pydantic_ai.exceptions import (
        ApprovalRequired,
        CallDeferred,
        ModelRetry,
        ToolFailed,
        UnexpectedModelBehavior,
    )

    if not isinstance(recorded, dict) or OUTCOME not in recorded:
        return recorded
    kind = recorded[OUTCOME]
    if kind == "return":
        return recorded["value"]
    if kind == "model_retry":
        raise ModelRetry(recorded["message"])
    if kind == "tool_failed":
        raise ToolFailed(recorded["message"])
    if kind == "approval_required":
        raise ApprovalRequired(metadata=recorded.get("metadata"))
    if kind == "call_deferred":
        raise CallDeferred(metadata=recorded.get("metadata"), kind=recorded.get("kind", "external"))
    if kind == "retries_exceeded":
        raise UnexpectedModelBehavior(recorded["message"])
    raise StepError("INTERNAL", f"unknown recorded tool outcome {kind!r}")


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return None if value is None else to_jsonable_python(value)
