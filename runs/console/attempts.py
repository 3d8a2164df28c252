"""A step's whole attempt history, rebuilt from the event log: the one derivation of
what became of each attempt, used by the run page, its timeline picture and the API.

Step rows only keep the latest attempt; the events keep every one: who claimed it
(``step.started``), how it ended (``ENDINGS``: succeeded, failed with its code, lost with
its worker and who took over, waited for an approval, fenced, ...), with the error code
and detail of each failure.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runs.models import Event, Step


@dataclass(frozen=True)
class Ending:
    """How an event ends an attempt: ``result`` is one word (``succeeded``, ``failed``,
    ``lost``, ``waited``, ``fenced``, ``unknown``, ``cancelled``, ``budget_exhausted``,
    ``given_back``), ``label`` the words shown, ``drawn`` how the timeline draws the bar
    (``succeeded``, ``failed``, ``interrupted``, ``asked``) and ``wait_after`` the name of
    the gap before the next attempt."""

    result: str
    label: str
    drawn: str
    wait_after: str = "wait"


#: Event types that end an attempt (their payload names the attempt).
ENDINGS = {
    "step.succeeded": Ending("succeeded", "succeeded", "succeeded"),
    "step.failed": Ending("failed", "failed", "failed", "takeover"),
    "step.retry_scheduled": Ending("failed", "failed, retry scheduled", "failed", "retry backoff"),
    "step.unknown": Ending("unknown", "outcome unknown", "interrupted", "takeover"),
    "step.cancelled": Ending("cancelled", "cancelled", "interrupted"),
    "step.budget_exhausted": Ending(
        "budget_exhausted", "budget exhausted (call not made)", "interrupted", "takeover"
    ),
    "step.abandoned": Ending("lost", "lost: its lease was taken", "interrupted", "lease expiry"),
    "lease.expired": Ending("lost", "lost: lease expired", "interrupted", "lease expiry"),
    "lease.owner_dead": Ending("lost", "lost: worker died", "interrupted", "worker death"),
    "lease.released": Ending("given_back", "given back by a stopping worker", "interrupted"),
    "step.released": Ending(
        "given_back", "given back after a database fault (not counted)", "interrupted"
    ),
    "step.waiting": Ending("waited", "waited", "asked"),
    "step.commit_rejected": Ending("fenced", "fenced: late write rejected", "interrupted"),
}

#: Step events without an attempt number that end the step's open attempt.
STEP_ENDINGS = {
    "step.superseded": Ending("superseded", "superseded by a resume", "interrupted"),
}


def ending_of(event_type: str, payload: Any) -> Ending | None:
    """The ending ``event_type`` (with its ``payload``) gives its attempt, or ``None``;
    ``step.waiting`` is labelled with what the step waits for ("waited for approval")."""
    ending = ENDINGS.get(event_type)
    if ending is not None and event_type == "step.waiting":
        waiting_for = payload.get("waiting_for") if isinstance(payload, dict) else None
        return Ending(ending.result, f"waited for {waiting_for or 'an answer'}", ending.drawn)
    return ending


@dataclass
class Attempt:
    """One claim of a step: ``number`` is the fencing token; ``result`` and ``outcome``
    (the words shown) say how it ended, ``ended_by`` by which event type (empty while
    it runs); a lost attempt names the worker that took the step over in
    ``taken_over_by``."""

    number: int
    worker: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    result: str = "running"
    outcome: str = "running"
    ended_by: str = ""
    error_code: str = ""
    error_detail: str = ""
    reclaimed_from: str = ""
    taken_over_by: str = ""
    notes: list[str] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        """The attempt as the API shows it: ``{attempt, worker, outcome (the ending
        event type, null while running), result, error_code, error_detail,
        taken_over_by, started_at, ended_at}``."""
        return {
            "attempt": self.number,
            "worker": self.worker or None,
            "outcome": self.ended_by or None,
            "result": self.result,
            "error_code": self.error_code or None,
            "error_detail": self.error_detail or None,
            "taken_over_by": self.taken_over_by or None,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }


@dataclass
class StepHistory:
    """A step row with its attempts (oldest first) and its other events."""

    step: Step
    attempts: list[Attempt] = field(default_factory=list)
    other_events: list[Event] = field(default_factory=list)


def attempts_by_step(events: Iterable[Event]) -> dict[int, list[Attempt]]:
    """``{step_id: [Attempt, ...]}`` (oldest first) from ``events``, a run's step events
    in seq order. Events without a step or attempt number are ignored, except the
    ``STEP_ENDINGS`` of a step's open attempt."""
    return {step_id: attempts for step_id, (attempts, _) in _derive(events).items()}


def step_histories(steps: list[Step], events: list[Event]) -> list[StepHistory]:
    """Pair each step with its attempts, built from ``events`` (the run's step events in
    seq order). Events that carry no attempt number stay in ``other_events``."""
    derived = _derive(event for event in events if event.step_id in {s.pk for s in steps})
    histories = []
    for step in steps:
        attempts, others = derived.get(step.pk, ([], []))
        histories.append(StepHistory(step, attempts, others))
    return histories


def _derive(events: Iterable[Event]) -> dict[int, tuple[list[Attempt], list[Event]]]:
    by_step: dict[int, tuple[list[Attempt], list[Event]]] = {}
    index: dict[tuple[int, int], Attempt] = {}
    for event in events:
        if event.step_id is None:
            continue
        attempts, others = by_step.setdefault(event.step_id, ([], []))
        payload = event.payload if isinstance(event.payload, dict) else {}
        number = payload.get("attempt")
        # Only step and lease events speak of a step attempt ("attempt" elsewhere, e.g. in
        # operation.verified, is the ledger's attempt).
        if not isinstance(number, int) or not event.type.startswith(("step.", "lease.")):
            others.append(event)
            ending = STEP_ENDINGS.get(event.type)
            open_attempts = [a for a in attempts if not a.ended_by]
            if ending is not None and open_attempts:
                _end(open_attempts[-1], event, ending, payload)
            elif attempts and event.type.startswith("step."):
                # What became of the step after its last attempt (an approval decided).
                attempts[-1].notes.append(event.type)
            continue
        attempt = index.get((event.step_id, number))
        if attempt is None:
            attempt = index[(event.step_id, number)] = Attempt(number)
            attempts.append(attempt)
        if event.type == "step.started":
            attempt.worker = str(payload.get("worker") or event.actor)
            attempt.started_at = event.created_at
            # Events recorded before the rename say "takeover_from".
            attempt.reclaimed_from = str(
                payload.get("reclaimed_from") or payload.get("takeover_from") or ""
            )
            continue
        ending = ending_of(event.type, payload)
        if ending is None:
            attempt.notes.append(event.type)
        elif attempt.ended_by:
            # A stale attempt's rejected write comes after its lease expired: keep the
            # first ending as the outcome, the later ones as notes.
            attempt.notes.append(ending.label)
        else:
            _end(attempt, event, ending, payload)
    for attempts, _ in by_step.values():
        attempts.sort(key=lambda a: a.number)
        for lost, after in zip(attempts, attempts[1:], strict=False):
            if lost.result == "lost":
                lost.taken_over_by = after.worker
    return by_step


def _end(attempt: Attempt, event: Event, ending: Ending, payload: dict) -> None:
    attempt.ended_at = event.created_at
    attempt.result = ending.result
    attempt.outcome = ending.label
    attempt.ended_by = event.type
    if not attempt.worker and payload.get("owner"):
        attempt.worker = str(payload["owner"])
    attempt.error_code = str(payload.get("error_code") or attempt.error_code)
    attempt.error_detail = str(
        payload.get("error_detail") or payload.get("reason") or attempt.error_detail
    )
