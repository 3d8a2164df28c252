"""Exceptions that steps and the engine raise to steer execution."""


class StepError(Exception):
    """A step failed with a machine-readable ``code`` (see ``runs.engine.effects.retry`` for which
    codes are retryable) and a human-readable ``detail``.

    ``retry_after``: how long the outside system asked to wait before the next try, as
    an HTTP ``Retry-After`` value (seconds as a number or digit string, or an HTTP date
    string) or ``None``; the next attempt starts no sooner, within the step's deadline
    (``runs.engine.effects.retry``). ``takeover``: when the step gives up, pause the run
    for a human whatever the step's ``on_exhausted`` says (the failure needs a person to
    look, e.g. a malformed model response). ``takeover_cause``, ``suggested_action`` and
    ``evidence``: what that takeover names (``Takeover.cause``, the fix, a JSON dict for
    its evidence); an empty ``suggested_action`` lets the engine choose one by the
    code's class (``runs.engine.effects.retry.suggested_action``).
    """

    takeover_cause = "retries_exhausted"
    suggested_action = ""
    evidence: dict | None = None

    def __init__(
        self,
        code: str,
        detail: str = "",
        *,
        retry_after: float | str | None = None,
        takeover: bool = False,
    ):
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail
        self.retry_after = retry_after
        self.takeover = takeover


class StepUnknown(StepError):
    """The step row names a step the deployed definition of its workflow version does not
    declare (a step renamed or removed by a deploy without a new version). Retried like
    a dependency that is away (another worker may run the code that knows it); when
    the attempts run out the run pauses with an ``unknown_workflow_version`` takeover
    (the code deployed does not match the run) whose reason names the step."""

    takeover_cause = "unknown_workflow_version"
    suggested_action = (
        "Deploy code whose definition of this workflow version declares the step (or "
        "resume the run from a checkpoint the deployed definition knows), then retry."
    )

    def __init__(self, detail: str):
        super().__init__("STEP_UNKNOWN", detail, takeover=True)


class ModelNotConfigured(StepError):
    """A step asks the default model and there is none: ``AGENTOPS_MODEL`` is empty and
    no installed app registers a default (a deployment without the lab has no ``sim``).
    Code ``MODEL_NOT_CONFIGURED``, never retried: the run pauses with a takeover, and
    retrying the step after the setting is fixed (and the workers restarted) runs it."""

    suggested_action = (
        "Set AGENTOPS_MODEL (e.g. openai:gpt-4.1-mini, with its key) for the workers, "
        "restart them, then retry the step."
    )

    def __init__(self, detail: str):
        super().__init__("MODEL_NOT_CONFIGURED", detail, takeover=True)


class NonDeterminism(StepError):
    """A step executed again asked a recorded call (``key``) with another tool or other
    arguments than the ones recorded: the recorded result answers a different request.

    Never retried: the run pauses with a ``non_determinism`` takeover whose evidence
    names the call (``idempotency_key``, ``action``) and both requests (``recorded`` and
    ``now``: ``{"tool", "arguments"}`` each).
    """

    takeover_cause = "non_determinism"

    def __init__(self, key: str, *, action: str, recorded: dict, now: dict):
        super().__init__(
            "NON_DETERMINISM",
            f"call {action} ({key}) was recorded as {recorded['tool']} with other arguments "
            f"than this execution asks: recorded {recorded['arguments']!r}, "
            f"now {now['tool']} {now['arguments']!r}"[:4000],
            takeover=True,
        )
        self.evidence = {
            "idempotency_key": key,
            "action": action,
            "recorded": recorded,
            "now": now,
        }


class ControlError(Exception):
    """A request the engine refuses, with a machine-readable ``code`` (e.g.
    ``unknown_workflow``, ``invalid_input``, ``run_terminal``) and optional field
    ``errors`` (``{field: message}``)."""

    def __init__(self, code: str, message: str, errors: dict[str, str] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.errors = errors or {}

    def unsaid_errors(self) -> dict[str, str]:
        """The field ``errors`` the ``message`` does not already state (a message built
        from its errors, ``"the edited arguments do not fit ...: amount: must be int"``,
        would otherwise print each reason twice)."""
        return {k: v for k, v in self.errors.items() if v not in self.message}

    @property
    def bad_input(self) -> bool:
        """Whether the code says the sender's value was wrong (every ``invalid_*`` code
        and ``BAD_INPUT_CODES``), rather than that the run's state refuses the request:
        each face answers both classes with one status of its own (the console 400 and
        409, the API 422 and 409)."""
        return self.code.startswith("invalid") or self.code in BAD_INPUT_CODES


#: ``ControlError`` codes of a wrong value that do not start with ``invalid``: a missing
#: or blank reason or evidence, a name the run's workflow does not have.
BAD_INPUT_CODES = frozenset(
    {
        "reason_required",
        "evidence_required",
        "unknown_workflow",
        "unknown_checkpoint",
        "unknown_step",
        "unknown_signal",
    }
)


class LeaseLost(Exception):
    """This attempt no longer holds the step's lease (it expired and another worker took
    over, or an operator released it); the attempt must stop without writing."""


class CancelRequested(Exception):
    """The run was asked to cancel; raised at a safe point so the step stops."""


class StaleCommit(Exception):
    """A fenced commit matched no row: the attempt is stale or the run moved on."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class OutcomeUnknown(Exception):
    """A side effect may or may not have happened and nothing could tell which (no
    ``verify`` hook, the hook answered "cannot tell", or an unsafe call timed out).

    The step becomes UNKNOWN and the run PAUSED for a human
    (``runs.engine.effects.unknown_outcomes``).
    ``operation_id``: the ledger row; ``evidence``: what was checked, for the takeover.
    """

    def __init__(self, operation_id: int, reason: str, evidence: str = ""):
        super().__init__(reason)
        self.operation_id = operation_id
        self.reason = reason
        self.evidence = evidence
