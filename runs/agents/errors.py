"""Provider failures as step errors with a machine-readable code.

- 429 (rate limit), 5xx, overload and connection errors: retryable (``RATE_LIMITED``,
  ``DEPENDENCY_UNAVAILABLE``), with the provider's ``Retry-After`` (seconds) carried to
  the retry policy, which waits at least that long within the step's deadline;
- a request timeout: ``TIMEOUT`` (retryable);
- 401/403: ``MODEL_AUTH``; 400/404/422 and other rejections: ``MODEL_REQUEST_INVALID``;
  exhausted quota: ``MODEL_QUOTA_EXCEEDED``. Never retried: the same request fails the
  same way.
- a response the engine cannot use (a tool call whose arguments are not a JSON object):
  ``MODEL_RESPONSE_INVALID``, no retry, and the run pauses for a human (takeover).
"""

import json
from typing import Any

from runs.engine.errors import StepError


def classify(exc: BaseException) -> StepError:
    """The ``StepError`` for a failure of a Pydantic AI model request (or of its SDK)."""
    from pydantic_ai import exceptions as e

    if isinstance(exc, StepError):
        return exc
    retry_after = getattr(exc, "retry_after", None)
    detail = f"{type(exc).__name__}: {exc}"[:2000]
    if isinstance(exc, e.ModelRequestTimeout):
        return StepError("TIMEOUT", detail)
    if isinstance(exc, e.ModelRateLimitError):
        return StepError("RATE_LIMITED", detail, retry_after=retry_after)
    if isinstance(exc, e.ModelQuotaExceededError):
        return StepError("MODEL_QUOTA_EXCEEDED", detail)
    if isinstance(exc, e.ModelAuthenticationError):
        return StepError("MODEL_AUTH", detail)
    if isinstance(exc, e.ModelRequestRejectedError):
        return StepError("MODEL_REQUEST_INVALID", detail)
    if isinstance(exc, e.ModelUnavailableError | e.ModelServerError | e.ModelConnectionError):
        return StepError("DEPENDENCY_UNAVAILABLE", detail, retry_after=retry_after)
    if isinstance(exc, e.ModelHTTPError):
        status = exc.status_code
        if status == 429:
            return StepError("RATE_LIMITED", detail, retry_after=retry_after)
        if status in (401, 403):
            return StepError("MODEL_AUTH", detail)
        if status >= 500:
            return StepError("DEPENDENCY_UNAVAILABLE", detail, retry_after=retry_after)
        return StepError("MODEL_REQUEST_INVALID", detail)
    if isinstance(exc, e.ModelAPIError):
        return StepError("DEPENDENCY_UNAVAILABLE", detail, retry_after=retry_after)
    if isinstance(exc, OSError | TimeoutError):
        return StepError("DEPENDENCY_UNAVAILABLE", detail)
    if isinstance(exc, e.UnexpectedModelBehavior):
        return StepError("MODEL_RESPONSE_INVALID", detail, takeover=True)
    return StepError("INTERNAL", detail)


def invalid_tool_call(tool_name: str, arguments: Any, response: Any) -> StepError:
    """``MODEL_RESPONSE_INVALID`` (with a takeover) for a tool call whose arguments are
    not a JSON object; the detail quotes the arguments as the model sent them."""
    shown = arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)
    return StepError(
        "MODEL_RESPONSE_INVALID",
        f"the model called {tool_name} with arguments that are not a JSON object: {shown[:500]!r}",
        takeover=True,
    )


def classify_agent_error(exc: BaseException) -> StepError:
    """The ``StepError`` for an error a Pydantic AI agent run raised outside any one
    model request or tool call (those are classified where they happen):

    - ``UsageLimitExceeded``: ``USAGE_LIMIT_EXCEEDED`` (the run's ``usage_limits``, or
      Pydantic AI's default request limit, stopped a looping agent);
    - ``UnexpectedModelBehavior`` (the model's output failed validation more often than
      the agent retries it, a tool's retries ran out, an empty answer):
      ``MODEL_RESPONSE_INVALID`` with a takeover: the run pauses for a person, who may
      retry it (another model, a fixed prompt) or fail it;
    - ``UserError`` (the agent is built wrong, e.g. a tool raises ``ApprovalRequired``
      but the output type has no ``DeferredToolRequests``): ``AGENT_DEFINITION_INVALID``;
    - a provider's error: as ``classify`` says;
    - anything else (an ``AgentRunError``, or an exception from the agent's own code
      such as an output function): ``AGENT_RUN_FAILED``, naming the exception.

    None is retried: the recorded conversation would end the same way again. The run
    fails (or pauses, for the takeover) and keeps the messages made so far.
    """
    from pydantic_ai import exceptions as e

    detail = f"{type(exc).__name__}: {exc}"[:2000]
    if isinstance(exc, e.UsageLimitExceeded):
        return StepError("USAGE_LIMIT_EXCEEDED", detail)
    if isinstance(exc, e.UnexpectedModelBehavior):
        return StepError("MODEL_RESPONSE_INVALID", detail, takeover=True)
    if isinstance(exc, e.UserError):
        return StepError("AGENT_DEFINITION_INVALID", detail)
    if isinstance(exc, e.ModelAPIError | OSError | TimeoutError):
        return classify(exc)
    return StepError("AGENT_RUN_FAILED", detail)
