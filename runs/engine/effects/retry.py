"""Retry policy as a small value object (after procrastinate's ``retry.py``).

A policy turns (attempt number, error code) into a decision: retry after a delay, or
give up. Backoff is applied through ``Step.not_before`` (database clock), never by
sleeping in a worker.
"""

import random
from dataclasses import dataclass, field

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
        # A model provider refused the request itself or its credentials.
        "MODEL_REQUEST_INVALID",
        "MODEL_AUTH",
        "MODEL_QUOTA_EXCEEDED",
        "MODEL_RESPONSE_INVALID",
    }
)


@dataclass(frozen=True)
class RetryDecision:
    """``retry``: try again; ``delay``: seconds until the next attempt may start."""

    retry: bool
    delay: float = 0.0
    reason: str = ""


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

    def __post_init__(self) -> None:
        # No retry is unbounded: a finite attempt count is required, and delays are sane.
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError("max_attempts must be an int >= 1")
        if self.initial_delay < 0 or self.max_delay < self.initial_delay or self.multiplier < 1:
            raise ValueError("need 0 <= initial_delay <= max_delay and multiplier >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        if self.deadline is not None and self.deadline <= 0:
            raise ValueError("deadline must be > 0 seconds (or None)")
        bad = self.retryable & NON_RETRYABLE_CODES
        if bad:
            raise ValueError(f"never retryable: {', '.join(sorted(bad))}")

    def bounds(self, attempt: int) -> tuple[float, float]:
        """``(lowest, highest)`` delay in seconds after attempt ``attempt`` fails."""
        base = min(self.max_delay, self.initial_delay * self.multiplier ** max(0, attempt - 1))
        return base * (1.0 - self.jitter), base

    def delay_for(self, attempt: int, rng: random.Random | None = None) -> float:
        """Backoff in seconds before the attempt after ``attempt`` (1-based)."""
        base = min(self.max_delay, self.initial_delay * self.multiplier ** max(0, attempt - 1))
        factor = 1.0 - self.jitter * (rng or random).random()
        return base * factor

    def decide(
        self,
        attempt: int,
        code: str,
        elapsed: float = 0.0,
        rng: random.Random | None = None,
        retry_after: float | None = None,
    ) -> RetryDecision:
        """Whether attempt ``attempt`` failing with ``code`` after ``elapsed`` seconds since
        the step's first start may be retried, and after how long.

        ``retry_after`` (seconds, from the outside system) makes the delay at least that
        long, capped by the ``deadline``: the retry then starts at the deadline instead of
        never (the deadline is the step's limit, not the provider's)."""
        if code not in self.retryable:
            return RetryDecision(False, reason=f"{code} is not retryable")
        if attempt >= self.max_attempts:
            return RetryDecision(
                False, reason=f"attempts exhausted ({attempt}/{self.max_attempts})"
            )
        delay = self.delay_for(attempt, rng)
        if self.deadline is not None and elapsed + delay > self.deadline:
            return RetryDecision(False, reason=f"deadline of {self.deadline}s would pass")
        if retry_after is not None and retry_after > delay:
            delay = float(retry_after)
            if self.deadline is not None and elapsed + delay > self.deadline:
                delay = max(0.0, self.deadline - elapsed)
        return RetryDecision(True, delay=delay)


DEFAULT_RETRY = RetryPolicy()
