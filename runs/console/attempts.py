"""A step's whole attempt history, rebuilt from the event log.

Step rows only keep the latest attempt; the events keep every one: who claimed it
(``step.started``), how it ended (``step.succeeded``, ``step.failed``,
``step.retry_scheduled``, ``lease.expired``, ``step.commit_rejected``, ...), with the
error code and detail of each failure.
"""

from dataclasses import dataclass, field
from datetime import datetime

from runs.models import Event, Step

#: Event types that end an attempt, and the outcome shown for each.
ENDINGS = {
    "step.succeeded": "succeeded",
    "step.failed": "failed",
    "step.retry_scheduled": "failed, retry scheduled",
    "step.unknown": "outcome unknown",
    "step.cancelled": "cancelled",
    "step.budget_exhausted": "budget exhausted (call not made)",
    "step.abandoned": "abandoned (lease lost)",
    "lease.expired": "lease expired",
    "step.commit_rejected": "late write rejected (stale attempt)",
    "step.released": "given back after a database fault (not counted)",
}


@dataclass
class Attempt:
    """One claim of a step: ``number`` is the fencing token."""

    number: int
    worker: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: str = "running"
    error_code: str = ""
    error_detail: str = ""
    reclaimed_from: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class StepHistory:
    """A step row with its attempts (oldest first) and its other events."""

    step: Step
    attempts: list[Attempt] = field(default_factory=list)
    other_events: list[Event] = field(default_factory=list)


def step_histories(steps: list[Step], events: list[Event]) -> list[StepHistory]:
    """Pair each step with its attempts, built from ``events`` (the run's step events in
    seq order). Events that carry no attempt number stay in ``other_events``."""
    by_step = {step.pk: StepHistory(step) for step in steps}
    index: dict[tuple[int, int], Attempt] = {}
    for event in events:
        history = by_step.get(event.step_id)
        if history is None:
            continue
        number = event.payload.get("attempt") if isinstance(event.payload, dict) else None
        # Only step and lease events speak of a step attempt ("attempt" elsewhere, e.g. in
        # operation.verified, is the ledger's attempt).
        if not isinstance(number, int) or not event.type.startswith(("step.", "lease.")):
            history.other_events.append(event)
            continue
        attempt = index.get((event.step_id, number))
        if attempt is None:
            attempt = index[(event.step_id, number)] = Attempt(number)
            history.attempts.append(attempt)
        payload = event.payload
        if event.type == "step.started":
            attempt.worker = str(payload.get("worker") or event.actor)
            attempt.started_at = event.created_at
            # Events recorded before the rename say "takeover_from".
            attempt.reclaimed_from = str(
                payload.get("reclaimed_from") or payload.get("takeover_from") or ""
            )
        elif event.type in ENDINGS:
            # A stale attempt's rejected write comes after its lease expired: keep the
            # first ending as the outcome, the later ones as notes.
            if attempt.ended_at is None:
                attempt.ended_at = event.created_at
                attempt.outcome = ENDINGS[event.type]
            else:
                attempt.notes.append(ENDINGS[event.type])
            attempt.error_code = str(payload.get("error_code") or attempt.error_code)
            attempt.error_detail = str(
                payload.get("error_detail") or payload.get("reason") or attempt.error_detail
            )
        else:
            attempt.notes.append(event.type)
    for history in by_step.values():
        history.attempts.sort(key=lambda a: a.number)
    return [by_step[step.pk] for step in steps]
