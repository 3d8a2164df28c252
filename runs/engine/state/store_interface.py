"""The store's interface: the moves that claim, keep and commit steps, and what they
take and return.

Two backends implement ``Store``. ``OrmStore`` (``store_orm``) makes each move one short
Django transaction on the locked run (``run_transaction``); on SQLite, which has one
writer, that is all there is. ``PostgresStore`` (``store_postgres``) makes the common
claim and commit one statement each (one round trip) and leaves what its statements
decline to the transactional moves it inherits. Which transition is legal, what a
fence refuses and which events a move writes are the gateway's rules (``RunTx``): a
backend only chooses the SQL shape. This module imports neither backend; ``store``
picks one, and callers take ``store.store()`` and never ask which backend they have.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from django.db.models import Q

from runs.engine.state.gateway import RunTx
from runs.models import Operation, Run, Step

#: ``Claim.outcome`` values.
CLAIMED, NOT_CLAIMABLE, PREPARE = "claimed", "not_claimable", "prepare"


@dataclass
class Claim:
    """What ``Store.claim`` did. ``outcome``: ``CLAIMED`` (``run`` and ``step`` as after
    the claim, ``step.attempt`` the fencing token, ``checkpoint_id`` and whole ``state``
    of the run's latest checkpoint, ``(None, {})`` when it has none), ``NOT_CLAIMABLE``
    (gone, not due, held by a live lease, or its run cannot execute: drop the
    notification, nothing was written) or ``PREPARE`` (due, but this process must first
    import or migrate the run's workflow version, or fire the crash injected before the
    step; ``run`` and ``step`` as read, nothing written: claim again afterwards)."""

    outcome: str
    run: Run | None = None
    step: Step | None = None
    checkpoint_id: int | None = None
    state: dict[str, Any] | None = None


@dataclass
class StepCommit:
    """A successful attempt to commit. ``run`` and ``step`` as the attempt holds them,
    ``attempt`` its fencing token, ``worker_id`` the committing worker, ``output`` the
    step's result (already checked storable). ``next_name``: the step to schedule next,
    ``None`` to finish the run. ``claimed_by``: the worker the next step is born RUNNING
    under (``None``: born PENDING and notified). ``state``: the whole state the step
    worked from; ``checkpoint_id`` and ``checkpoint_state``: the checkpoint it started
    from (the new one stores what changed since). ``messages``: the step's new messages
    (``{id, role, content, tool_calls, tool_call_id, draft?}``, values checked);
    ``summaries``: its new summaries. ``delay`` (seconds) or ``at`` (an aware instant)
    holds the next step back: a durable timer."""

    run: Run
    step: Step
    attempt: int
    worker_id: str
    output: Any
    next_name: str | None
    claimed_by: str | None
    state: dict[str, Any]
    checkpoint_id: int | None
    checkpoint_state: dict[str, Any]
    messages: list[dict[str, Any]] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)
    delay: float = 0.0
    at: datetime | None = None


@dataclass
class NewRun:
    """A run for ``Store.create_run``, its input already checked. ``workflow`` and
    ``version`` name the workflow, ``first_step`` its first step; ``thread_id`` (and
    ``owner``, a user or ``None``) the thread, created when new; ``goal``: the text of the
    run's first user message, ``None`` when the workflow takes none (its first 2000
    characters are the run's goal). ``request_id`` (``""``: none) is the idempotency
    key, unique per owner, and ``request_fingerprint`` the request it answers.
    ``parent_step``, ``child_position`` and ``detached`` make it a child run.
    ``concurrency_key`` and ``concurrency_limit``: its concurrency place. ``actor``
    writes the events."""

    workflow: str
    version: int
    first_step: str
    thread_id: str
    input: Any
    actor: str
    owner: Any = None
    goal: str | None = None
    budget: dict[str, Any] = field(default_factory=dict)
    faults: dict[str, Any] = field(default_factory=dict)
    request_id: str = ""
    request_fingerprint: str = ""
    concurrency_key: str = ""
    concurrency_limit: int | None = None
    parent_step: Step | None = None
    child_position: int | None = None
    detached: bool = False


@dataclass
class Committed:
    """What ``Store.commit`` did. ``applied`` ``False``: the fence refused (a
    ``step.commit_rejected`` event says why) and nothing else was written. Otherwise
    ``next_step_id`` (``None`` when the run finished or stopped), ``next_step`` (that
    step when it was born RUNNING at attempt 1 under ``claimed_by``, as inserted, with
    its ``run``), the saved checkpoint's ``checkpoint_id`` and whole ``state``,
    ``finished`` (the run SUCCEEDED) and ``run`` as after the commit."""

    applied: bool
    next_step_id: int | None = None
    next_step: Step | None = None
    checkpoint_id: int | None = None
    state: dict[str, Any] | None = None
    finished: bool = False
    run: Run | None = None


#: ``Due.fence`` values: the attempt's whole fence (run not terminal, same generation,
#: RUNNING at the attempt under an unexpired lease) or only its attempt (a process that
#: lost the database, whose lease may have run out while nobody took the step).
LEASE, ATTEMPT = "lease", "attempt"


@dataclass
class Due:
    """A step for ``Store.schedule`` to make due: PENDING from ``at`` (an aware instant;
    ``None``: now, on the database clock), with the event ``event_type`` (``payload``).

    ``attempt`` set: the RUNNING attempt gives the step back behind its ``fence``
    (``LEASE`` or ``ATTEMPT``), its lease released; a refusal writes only
    ``step.commit_rejected`` (``worker`` and ``rejected`` in its payload). ``attempt``
    ``None``: the step, held by nobody, moves from the status it was read with (UNKNOWN,
    FAILED) to PENDING; a PENDING step only has its time moved (no event: the caller
    says why in its own). ``counted`` ``False``: the attempt does not count against
    ``max_attempts``. ``notify``: workers are told after commit (a step due later is
    left to the sweeper). ``progress`` ``False``: the event is not the run moving on.
    ``fields``: further plain columns (``error_code``, ``attempt_base``, ...)."""

    step: Step
    actor: str
    event_type: str = "step.requeued"
    payload: dict[str, Any] = field(default_factory=dict)
    at: datetime | None = None
    attempt: int | None = None
    fence: str = LEASE
    counted: bool = True
    notify: bool = True
    progress: bool = True
    rejected: dict[str, Any] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class Decision:
    """An approval decision for ``Store.decide``. ``approval_id`` and its ``step_id``;
    ``target``: APPROVED, REJECTED or EXPIRED; ``payload`` the ``approval.<target>``
    event's; ``fields`` the row's plain columns (``decided_by``, ``decided_at``,
    ``comment``); ``only_if`` a further condition (an expiry: past its deadline).
    ``output``: what the waiting step succeeds with. ``recorded``: the decision was
    stored earlier (while the run was paused): only its route is taken now."""

    approval_id: int
    step_id: int
    target: str
    actor: str
    output: dict[str, Any]
    payload: dict[str, Any] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    only_if: Q | None = None
    recorded: bool = False


@dataclass
class Resolution:
    """A takeover or an unknown outcome for ``Store.resolve`` to settle. ``note``:
    ``{"action", "reason", "evidence", ...}`` of the takeover's resolution; ``takeover``
    the one to resolve (``None``: the run's open one, if any, further narrowed by
    ``match``, e.g. ``{"cause": ...}``); ``record`` ``False``: no ``takeover.resolved``
    event (the caller writes its own). ``operation``: the ledger row of an unknown
    outcome, settled to ``operation_status`` with ``operation_result`` (checked
    storable). ``due``: the step to make due with it (``Store.schedule``)."""

    actor: str
    note: dict[str, Any]
    takeover: Any = None
    record: bool = True
    match: dict[str, Any] = field(default_factory=dict)
    operation: Operation | None = None
    operation_status: str = ""
    operation_result: Any = None
    due: Due | None = None


class Store(Protocol):
    """The moves of the execution path. Every time is the database's; every write
    behind a lease is fenced by its attempt; database errors propagate."""

    def claim(self, step_id: int, worker_id: str, ttl: float, *, known: list[str]) -> Claim:
        """Claim ``step_id`` for ``worker_id`` with a lease of ``ttl`` seconds: a new
        attempt (the fencing token), a PENDING run moved to RUNNING (``run.running``), the
        step made the run's current one, ``step.started`` (``reclaimed_from`` after an
        expired lease), and the run's latest checkpoint read. Due: PENDING with
        ``not_before`` passed or RUNNING with an expired lease. ``known``: the
        ``"<workflow>@<version>"`` keys this process can execute; another version gives
        ``PREPARE``. Returns ``Claim``."""
        ...

    def claim_due(self, worker_id: str, ttl: float, limit: int, *, known: list[str]) -> list[Step]:
        """Claim up to ``limit`` due steps (oldest ``not_before`` first) for
        ``worker_id`` as ``claim`` claims one, without reading checkpoints; steps that
        need ``PREPARE`` are left unclaimed, and a backend may take fewer than are due
        (PostgreSQL's statement takes at most one step per run in one call). Two workers
        claiming at once take different steps. Returns the claimed steps as after the
        claim, each with its ``run`` (``step.attempt`` the fencing token)."""
        ...

    def heartbeat(self, held: list[tuple[int, int]], ttl: float) -> dict[int, str]:
        """One statement: extend the lease of each ``(step_id, attempt)`` in ``held``
        to ``ttl`` seconds from now, only while that attempt holds the RUNNING step, and
        read each renewed step's run status with it (``leases.PAUSE_REQUESTED`` while a
        pause is requested). Returns ``{step_id: run status}``
        of the renewed steps, from which the caller tells each slot whether to stop
        (a cancel requested, the run finished); a step left out lost its lease, and a
        stale attempt's step is left as it is."""
        ...

    def commit(self, commit: StepCommit) -> Committed:
        """Commit a step behind its fence and schedule its successor in one transaction:
        the step SUCCEEDED with its output (``step.succeeded``), its messages and
        summaries, checkpoint ``after:<step>`` (``checkpoint.saved``), then the next step
        (``step.scheduled``, and ``step.started`` when born claimed) or the run's end
        (``run.succeeded``); a cancel-requested run stops after the checkpoint. The
        fence refuses when the run is terminal or in another generation, or the step is
        no longer RUNNING at ``attempt`` under an unexpired lease: then only
        ``step.commit_rejected`` is written. Returns ``Committed``."""
        ...

    def create_run(self, new: NewRun) -> tuple[Run, bool]:
        """Create the run ``new`` in one transaction: its thread when new, the run
        PENDING (``run.created``), its first user message (``message.created``, the
        thread's next message seq), checkpoint ``start`` and its first step PENDING at
        seq 1 (``step.scheduled``), workers notified after commit. With a
        ``request_id`` an existing run of that owner and key is returned as it is and
        nothing is written; of concurrent creations with one key the unique constraint
        lets one win and the others return its run. Returns ``(run, created)``, the run
        as stored; other database errors propagate."""
        ...

    # The moves below act inside the caller's transaction on the locked run (``tx``):
    # what they do follows from what the caller read under that lock (a retry policy's
    # answer, an approval's status, the run's), and they compose with its other moves.

    def schedule(self, tx: RunTx, due: Due) -> bool:
        """Make ``due.step`` due at ``due.at``: a retry's backoff, a released or
        requeued attempt, a step woken by an operator (see ``Due``); workers told after
        commit when ``due.notify``. A new step (the next one, a timer, a woken wait's
        successor) is scheduled by ``commit`` and the gateway's ``advance``. Returns
        ``False`` when the fence refused or the step had moved (then only
        ``step.commit_rejected`` is written for a fenced attempt, nothing otherwise)."""
        ...

    def decide(self, tx: RunTx, decision: Decision) -> bool:
        """Apply an approval decision: the PENDING Approval row decided
        (``approval.<target>``) and, while the run waits for it (WAITING_APPROVAL), the
        waiting step SUCCEEDED with ``decision.output`` and the run continued on the
        approval's route for it (``approve``, ``reject``, ``expire``); a reject or an
        expiry without a route fails the run (APPROVAL_REJECTED, APPROVAL_EXPIRED).
        Returns ``False``, writing nothing, when the approval was no longer PENDING (or
        ``only_if`` did not hold)."""
        ...

    def resolve(self, tx: RunTx, resolution: Resolution) -> Any:
        """Settle a takeover or an unknown outcome: the takeover RESOLVED
        (``takeover.resolved`` unless ``record`` is ``False``), the ledger row settled
        (when ``operation``) and the step made due (when ``due``). Returns the takeover
        resolved, ``None`` when none was open; a named ``takeover`` no longer OPEN (a
        stale resolution) writes nothing at all. Raises ``InvalidValue`` for an
        operation result that cannot be stored (the caller's transaction rolls back)."""
        ...
