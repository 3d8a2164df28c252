"""Run and step states and the one table of allowed transitions for each.

The mermaid diagram in README ("State machine") is drawn from these tables; a test walks
every pair of states against them, so the picture, the table and the code cannot drift.
Terminal states (DESIGN section 1.3) have no outgoing edges.
"""

from django.db import models


class RunStatus(models.TextChoices):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    WAITING_APPROVAL = "WAITING_APPROVAL"
    WAITING_EXTERNAL = "WAITING_EXTERNAL"
    PAUSED = "PAUSED"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class StepStatus(models.TextChoices):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    WAITING = "WAITING"
    CANCELLED = "CANCELLED"
    SUPERSEDED = "SUPERSEDED"


R = RunStatus
S = StepStatus

RUN_TERMINAL = frozenset({R.SUCCEEDED, R.FAILED, R.CANCELLED})
STEP_TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.SUPERSEDED})
#: Run states in which a worker may claim and execute a step of the run.
RUN_EXECUTABLE = frozenset({R.PENDING, R.RUNNING})
#: Steps of the current generation that are not finished yet (the run's open step).
STEP_OPEN = frozenset({S.PENDING, S.RUNNING, S.WAITING, S.UNKNOWN})
#: Open steps nothing executes right now: a cancel request cancels them at once.
STEP_IDLE_OPEN = frozenset({S.PENDING, S.WAITING, S.UNKNOWN})
#: Steps a resume from a checkpoint leaves alone (already out of the way).
STEP_SETTLED = frozenset({S.SUPERSEDED, S.CANCELLED})
#: Steps whose work completed (SUPERSEDED ones only if they had finished without error).
STEP_COMPLETED = frozenset({S.SUCCEEDED, S.SUPERSEDED})
#: Steps an operator may retry or mark done on a PAUSED run.
STEP_RETRYABLE = frozenset({S.FAILED, S.UNKNOWN})
#: Runs the watchdog checks for "no event for too long".
RUN_WATCHED = frozenset({R.RUNNING, R.WAITING_EXTERNAL})

RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    R.PENDING: frozenset({R.RUNNING, R.PAUSED, R.CANCEL_REQUESTED, R.CANCELLED, R.FAILED}),
    R.RUNNING: frozenset(
        {
            R.WAITING_APPROVAL,
            R.WAITING_EXTERNAL,
            R.PAUSED,
            R.CANCEL_REQUESTED,
            R.SUCCEEDED,
            R.FAILED,
        }
    ),
    R.WAITING_APPROVAL: frozenset({R.RUNNING, R.PAUSED, R.CANCEL_REQUESTED, R.FAILED}),
    R.WAITING_EXTERNAL: frozenset({R.RUNNING, R.PAUSED, R.CANCEL_REQUESTED, R.FAILED}),
    R.PAUSED: frozenset({R.RUNNING, R.CANCEL_REQUESTED, R.FAILED}),
    R.CANCEL_REQUESTED: frozenset({R.CANCELLED}),
    R.SUCCEEDED: frozenset(),
    R.FAILED: frozenset(),
    R.CANCELLED: frozenset(),
}

STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.RUNNING, S.CANCELLED, S.SUPERSEDED, S.SUCCEEDED}),
    # RUNNING -> RUNNING is an expired lease reclaimed by another worker (attempt + 1);
    # RUNNING -> PENDING is a retry with backoff or a released lease.
    S.RUNNING: frozenset(
        {S.RUNNING, S.PENDING, S.SUCCEEDED, S.FAILED, S.UNKNOWN, S.WAITING, S.CANCELLED}
    ),
    # UNKNOWN is left only by a decision: verified/resolved done, or not done (run it).
    S.UNKNOWN: frozenset({S.SUCCEEDED, S.PENDING, S.FAILED, S.CANCELLED, S.SUPERSEDED}),
    S.WAITING: frozenset({S.SUCCEEDED, S.FAILED, S.PENDING, S.CANCELLED, S.SUPERSEDED}),
    S.SUCCEEDED: frozenset({S.SUPERSEDED}),
    S.FAILED: frozenset({S.SUPERSEDED}),
    S.CANCELLED: frozenset(),
    S.SUPERSEDED: frozenset(),
}


class CompensationStatus(models.TextChoices):
    """``Run.compensation_status``: ``""`` nothing to compensate; PENDING a pass is due
    or running; DONE every completed step was undone; REVIEW done, with items for a
    person to check by hand."""

    NONE = "", "none"
    PENDING = "PENDING"
    DONE = "DONE"
    REVIEW = "REVIEW"


C = CompensationStatus

#: A pass may be started again at any time (it is idempotent through the ledger), so
#: every state leads back to PENDING; only a pass's end sets DONE or REVIEW.
COMPENSATION_TRANSITIONS: dict[str, frozenset[str]] = {
    C.NONE: frozenset({C.PENDING}),
    C.PENDING: frozenset({C.PENDING, C.DONE, C.REVIEW}),
    C.DONE: frozenset({C.PENDING}),
    C.REVIEW: frozenset({C.PENDING}),
}


class IllegalTransition(Exception):
    """Raised when code asks for a transition the tables above do not allow.

    Attributes: ``entity`` ("run" or "step"), ``source`` and ``target`` status strings.
    """

    def __init__(self, entity: str, source: str, target: str):
        super().__init__(f"{entity} transition {source} -> {target} is not allowed")
        self.entity = entity
        self.source = source
        self.target = target


def run_can(source: str, target: str) -> bool:
    """True if a run may move from ``source`` to ``target``."""
    return target in RUN_TRANSITIONS.get(source, frozenset())


def step_can(source: str, target: str) -> bool:
    """True if a step may move from ``source`` to ``target``."""
    return target in STEP_TRANSITIONS.get(source, frozenset())


def compensation_can(source: str, target: str) -> bool:
    """True if a run's compensation status may move from ``source`` to ``target``."""
    return target in COMPENSATION_TRANSITIONS.get(source, frozenset())


def run_sources(target: str) -> list[str]:
    """All run states from which ``target`` may be reached (for conditional UPDATEs)."""
    return sorted(s for s, targets in RUN_TRANSITIONS.items() if target in targets)


def step_sources(target: str) -> list[str]:
    """All step states from which ``target`` may be reached (for conditional UPDATEs)."""
    return sorted(s for s, targets in STEP_TRANSITIONS.items() if target in targets)
