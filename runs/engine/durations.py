"""The longest span the engine turns into a duration or an instant.

A number that becomes a ``timedelta`` or a time (a sleep, a schedule's interval, a
wait's timeout) must stay far inside what ``datetime`` and the database hold, or the
arithmetic raises ``OverflowError`` where nobody called it. Every such number is
checked here, once, where it enters: a step's value raises ``InvalidDuration`` (a
``StepError`` that is never retried), the channels translate ``duration_problem``
into their own refusal.
"""

from datetime import datetime, timedelta
from typing import Any

from runs.engine.errors import StepError
from runs.engine.rules import NOT_FINITE, TOO_LARGE, TOO_SMALL, number_problem

#: Longest duration in seconds the engine accepts: ten years (315,360,000 s).
MAX_SECONDS = 10 * 365 * 86400
#: Error code of a step's out-of-range duration or instant.
INVALID_DURATION = "INVALID_DURATION"


class InvalidDuration(StepError, ValueError):
    """A duration or instant out of range; ``code`` is ``INVALID_DURATION`` and the
    detail names what it was for and the allowed range. Also a ``ValueError``, as a bad
    argument is."""

    def __init__(self, detail: str):
        super().__init__(INVALID_DURATION, detail)


def duration_problem(value: Any, *, low: float = 0, whole: bool = False) -> str | None:
    """Why ``value`` is not a duration in seconds from ``low`` to ``MAX_SECONDS``
    (``whole``: a whole number; ``bool`` and text never are), or ``None``."""
    kind = "a whole number" if whole else "a number"
    found = number_problem(value, integer=whole, minimum=low, maximum=MAX_SECONDS)
    if found is None:
        return None
    if found in (NOT_FINITE, TOO_SMALL, TOO_LARGE):
        return f"must be {kind} of seconds from {low:g} to {MAX_SECONDS} (10 years)"
    return f"must be {kind} of seconds, not {type(value).__name__}"


def check_seconds(value: Any, what: str, *, low: float = 0) -> float:
    """``value`` as seconds (float) when it is a finite number from ``low`` to
    ``MAX_SECONDS``; raises ``InvalidDuration`` naming ``what`` otherwise."""
    reason = duration_problem(value, low=low)
    if reason is not None:
        raise InvalidDuration(f"{what} {reason}, not {_shown(value)}")
    return float(value)


def check_instant(instant: Any, what: str, now: datetime) -> datetime:
    """``instant`` when it is an aware ``datetime`` no more than ``MAX_SECONDS`` after
    ``now`` (a past one is fine); raises ``InvalidDuration`` naming ``what`` otherwise."""
    if not isinstance(instant, datetime) or instant.tzinfo is None:
        raise InvalidDuration(f"{what} must be an aware datetime, not {_shown(instant)}")
    if instant - now > timedelta(seconds=MAX_SECONDS):
        raise InvalidDuration(f"{what} must be at most {MAX_SECONDS} seconds (10 years) ahead")
    return instant


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
