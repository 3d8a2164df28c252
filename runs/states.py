"""Run and step states and the one table of allowed transitions for each.

The mermaid diagram and the command table in README ("State machine") are generated
from these tables (``python manage.py states --write-readme``; a test compares them), a
test walks every pair of states against them, and every operator command checks its
run's state against ``RUN_COMMANDS``, so the picture, the tables and the code cannot
drift. Terminal states have no outgoing edges.
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
#: Event types written by a run status transition (``run.<status>``) or its creation:
#: the latest one of a run says since when it is in its current state.
RUN_STATE_EVENTS = ("run.created", *(f"run.{s.lower()}" for s in RunStatus.values))

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
    # PAUSED -> WAITING_*: a run paused while it waited goes back to waiting when its
    # takeover is resolved with "resume" (its approval or callback is still open).
    R.PAUSED: frozenset(
        {R.RUNNING, R.WAITING_APPROVAL, R.WAITING_EXTERNAL, R.CANCEL_REQUESTED, R.FAILED}
    ),
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


#: Operator commands (CLI, console, API alike) and the run states each one applies to.
#: Each is read from the transition table: a command that moves the run to a state
#: applies exactly where the table allows that move.
RUN_COMMANDS: dict[str, frozenset[str]] = {
    # PAUSED with an operator_request takeover.
    "pause": frozenset(s for s, t in RUN_TRANSITIONS.items() if R.PAUSED in t),
    # CANCEL_REQUESTED, then the cancel flow.
    "cancel": frozenset(s for s, t in RUN_TRANSITIONS.items() if R.CANCEL_REQUESTED in t),
    # A PAUSED run's failed or unknown step again, or its takeover resolved: RUNNING.
    "retry": frozenset({R.PAUSED}),
    "resolve_takeover": frozenset({R.PAUSED}),
    # The waiting approval step succeeds and the run goes RUNNING on its route.
    "decide_approval": frozenset({R.WAITING_APPROVAL}),
    # Later steps superseded, the run RUNNING from the checkpoint: every state that can
    # reach RUNNING (or is in it).
    "resume_from_checkpoint": frozenset(
        s for s, t in RUN_TRANSITIONS.items() if R.RUNNING in t or s == R.RUNNING
    ),
    # Notify the open step again; the run keeps its state.
    "redispatch": RUN_EXECUTABLE,
    # A new run from one of this run's checkpoints; this one, finished, stays as it is.
    "replay": RUN_TERMINAL,
}


#: Where an operator finds each command (README's table).
COMMAND_ENTRY_POINTS = {
    "pause": "`runs pause`",
    "cancel": "`runs cancel`, console, API",
    "retry": "`approvals resolve ID retry`, console",
    "resolve_takeover": "`approvals resolve`, `runs resolve`, `runs budget`, console",
    "decide_approval": "`approvals decide`, console, API",
    "resume_from_checkpoint": "`runs resume --from`, console, API",
    "redispatch": "`runs resume`, console",
    "replay": "`runs replay`, console, API",
}


def command_allows(command: str, status: str) -> bool:
    """True if operator ``command`` (a key of ``RUN_COMMANDS``) applies to a run in
    ``status``; ``KeyError`` for an unknown command."""
    return status in RUN_COMMANDS[command]


def command_states(command: str) -> str:
    """The states ``command`` applies to, for messages: ``"PAUSED or RUNNING"``."""
    states = [s for s in RunStatus.values if s in RUN_COMMANDS[command]]
    return ", ".join(states[:-1]) + (" or " if len(states) > 1 else "") + states[-1]


def mermaid_diagram() -> str:
    """The run state machine as a mermaid ``stateDiagram-v2`` (README "State machine")."""
    lines = ["stateDiagram-v2", "    [*] --> PENDING"]
    for source in RunStatus.values:
        for target in RunStatus.values:
            if target in RUN_TRANSITIONS[source]:
                lines.append(f"    {source} --> {target}")
    lines += [f"    {state} --> [*]" for state in RunStatus.values if state in RUN_TERMINAL]
    return "\n".join(lines)


def commands_table() -> str:
    """The markdown table of ``RUN_COMMANDS`` (README "State machine")."""
    rows = ["| command | where | applies to runs in |", "| --- | --- | --- |"]
    for command in RUN_COMMANDS:
        states = [s for s in RunStatus.values if s in RUN_COMMANDS[command]]
        rows.append(f"| `{command}` | {COMMAND_ENTRY_POINTS[command]} | {', '.join(states)} |")
    return "\n".join(rows)


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
