"""Retry policy as a small value object (after procrastinate's ``retry.py``).

A policy turns (attempt number, error code) into a decision: retry after a delay, or
give up. Backoff is applied through ``Step.not_before`` (database clock), never by
sleeping in a worker.
"""

import math
import random
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

from runs.engine.durations import duration_problem
from runs.engine.rules import number_problem

RETRYABLE_CODES = frozenset({"RATE_LIMITED", "DEPENDENCY_UNAVAILABLE", "TIMEOUT", "LEASE_LOST"})
#: Never retried, whatever a policy lists (a retry cannot fix a bad request, and an
#: exhausted budget or an unknown outcome needs a human, not another attempt).
NON_RETRYABLE_CODES = frozenset(
    {
        "INVALID_ARGUMENT",
        "PERMISSION_DENIED",
        "INTERNAL",
        "BUDGET_EXHAUSTED",
        "ATTEMPTS_EXHAUSTED",
        "UNKNOWN_OUTCOME",
        "INVALID_OUTPUT",
        "INVALID_DURATION",
        # A re-executed step asked a recorded call differently: the code or its inputs
        # changed under the run, and only a person can say which request is right.
        "NON_DETERMINISM",
        # A model provider refused the request itself or its credentials.
        "MODEL_REQUEST_INVALID",
        "MODEL_AUTH",
        # No model named and no default model: a setting to fix, not a passing fault.
        "MODEL_NOT_CONFIGURED",
        "MODEL_QUOTA_EXCEEDED",
        "MODEL_RESPONSE_INVALID",
    }
)

#: Non-retryable codes by what a person does about them (``suggested_action``).
INPUT_CODES = frozenset({"INVALID_ARGUMENT", "INVALID_DURATION", "MODEL_REQUEST_INVALID"})
ACCESS_CODES = frozenset({"PERMISSION_DENIED", "MODEL_AUTH", "MODEL_QUOTA_EXCEEDED"})
CODE_FAULT_CODES = frozenset({"INTERNAL", "INVALID_OUTPUT", "MODEL_RESPONSE_INVALID"})

SUGGEST_DEPENDENCY = "Check the dependency, then retry the step."
SUGGEST_INPUT = (
    "A retry with the same input fails the same way: fix the input (resume with an input "
    "patch, or edit what the step reads) and retry the step, or resolve the takeover "
    "(mark done or cancel)."
)
SUGGEST_ACCESS = "Fix the credentials, permission or quota the error names, then retry the step."
SUGGEST_CODE_FAULT = (
    "Read the error: the step's code or the model's answer is at fault. Deploy a fix "
    "and retry the step (a model may answer well on a retry), or resolve the takeover."
)
SUGGEST_OTHER = (
    "Read the error; retry the step once its cause is fixed, or resolve the takeover "
    "(mark done or cancel)."
)


def suggested_action(code: str, retryable: frozenset = RETRYABLE_CODES) -> str:
    """What a takeover opened by a step that failed with ``code`` suggests, by the
    code's class: a retryable one (in ``retryable``, the step's policy's codes) names
    the dependency, an input error fixing the input, an access error the credentials,
    a fault of the step's code or the model's answer a fix; any other code reading the
    error. Never raises."""
    if code in retryable:
        return SUGGEST_DEPENDENCY
    if code in INPUT_CODES:
        return SUGGEST_INPUT
    if code in ACCESS_CODES:
        return SUGGEST_ACCESS
    if code in CODE_FAULT_CODES:
        return SUGGEST_CODE_FAULT
    return SUGGEST_OTHER


def retry_after_seconds(value: float | str | None, now: float | None = None) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` value: a number of seconds (number or
    digit string) or an HTTP date (``Wed, 21 Oct 2026 07:28:00 GMT``), relative to
    ``now`` (Unix seconds, default this machine's clock: the date comes from another
    machine's clock anyway). A date in the past is 0; ``None`` or anything unreadable
    is ``None`` (the policy's own backoff applies)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        # NaN, infinity and an int past a float's range (10**400) are unreadable.
        if number_problem(value, minimum=-(10**300), maximum=10**300) is not None:
            return None
        return max(0.0, float(value))
    text = str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP date is always GMT
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


@dataclass(frozen=True)
class RetryDecision:
    """``retry``: try again; ``delay``: seconds until the next attempt may start;
    ``retry_after``: the wait the dependency asked for (seconds), if it did."""

    retry: bool
    delay: float = 0.0
    reason: str = ""
    retry_after: float | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, bounded by attempts and a total deadline.

    Delays in seconds: ``initial_delay * multiplier ** (attempt - 1)``, capped at
    ``max_delay``, then multiplied by a random factor in ``[1 - jitter, 1]`` ("equal
    jitter" is avoided on purpose: the cap stays a cap). ``deadline``: seconds from the
    step's first start after which no retry is scheduled (``None``: no deadline).
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 60.0
    multiplier: float = 2.0
    jitter: float = 0.2
    deadline: float | None = None
    retryable: frozenset = field(default=RETRYABLE_CODES)
    #: Longest ``Retry-After`` honoured, in seconds (a bigger one is cut to this).
    max_retry_after: float = 3600.0

    def __post_init__(self) -> None:
        # No retry is unbounded: a finite attempt count is required, and delays are sane.
        if number_problem(self.max_attempts, integer=True, minimum=1) is not None:
            raise ValueError("max_attempts must be an int >= 1")
        if self.initial_delay < 0 or self.max_delay < self.initial_delay or self.multiplier < 1:
            raise ValueError("need 0 <= initial_delay <= max_delay and multiplier >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        if self.deadline is not None and self.deadline <= 0:
            raise ValueError("deadline must be > 0 seconds (or None)")
        for what in ("initial_delay", "max_delay", "max_retry_after", "deadline"):
            value = getattr(self, what)
            if value is not None and duration_problem(value) is not None:
                raise ValueError(f"{what} {duration_problem(value)}")
        bad = self.retryable & NON_RETRYABLE_CODES
        if bad:
            raise ValueError(f"never retryable: {', '.join(sorted(bad))}")

    def _base(self, attempt: int) -> float:
        try:
            grown = self.initial_delay * self.multiplier ** max(0, attempt - 1)
        except OverflowError:
            # A late attempt's exponential outgrows a float; the cap applies all the same.
            grown = math.inf
        return min(self.max_delay, grown)

    def bounds(self, attempt: int) -> tuple[float, float]:
        """``(lowest, highest)`` delay in seconds after attempt ``attempt`` fails."""
        base = self._base(attempt)
        return base * (1.0 - self.jitter), base

    def delay_for(self, attempt: int, rng: random.Random | None = None) -> float:
        """Backoff in seconds before the attempt after ``attempt`` (1-based)."""
        base = self._base(attempt)
        factor = 1.0 - self.jitter * (rng or random).random()
        return base * factor

    def decide(
        self,
        attempt: int,
        code: str,
        elapsed: float = 0.0,
        rng: random.Random | None = None,
        retry_after: float | str | None = None,
    ) -> RetryDecision:
        """Whether attempt ``attempt`` failing with ``code`` after ``elapsed`` seconds since
        the step's first start may be retried, and after how long.

        ``retry_after`` (what the outside system asked for: seconds, or an HTTP
        ``Retry-After`` value, read with ``retry_after_seconds``) is a lower bound on the
        delay, cut to ``max_retry_after``; when it alone would pass the deadline, the
        next attempt waits until the deadline instead (the deadline is the step's limit,
        not the provider's).
        """
        if code not in self.retryable:
            return RetryDecision(False, reason=f"{code} is not retryable")
        if attempt >= self.max_attempts:
            return RetryDecision(
                False, reason=f"attempts exhausted ({attempt}/{self.max_attempts})"
            )
        backoff = self.delay_for(attempt, rng)
        if self.deadline is not None and elapsed + backoff > self.deadline:
            return RetryDecision(False, reason=f"deadline of {self.deadline}s would pass")
        # Numbers go through the reader too: NaN or a bool is no wait at all.
        wait = retry_after_seconds(retry_after)
        if wait is None:
            return RetryDecision(True, delay=backoff)
        asked = min(wait, self.max_retry_after)
        delay = max(backoff, asked)
        reason = f"Retry-After {wait:g}s"
        if self.deadline is not None and elapsed + delay > self.deadline:
            delay = self.deadline - elapsed
            reason += f", capped by the deadline of {self.deadline}s"
        return RetryDecision(True, delay=delay, reason=reason, retry_after=wait)


DEFAULT_RETRY = RetryPolicy()
