"""Durable state of agent work: threads, runs, steps, messages, artifacts, events,
checkpoints, the side-effect ledger, and the human interventions a run waits on
(approvals and takeovers).

Status columns are written only through ``runs.engine.state.gateway`` and
``runs.engine.state.leases`` (conditional UPDATEs); the state-guarded querysets
(``runs.state_fields``) refuse any other ``update()`` of them.
Timestamps that drive leases and stuck detection come from the database clock.
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from runs.checked_fields import CheckedCharField, CheckedJSONField, CheckedTextField
from runs.payload_field import PayloadJSONField
from runs.state_fields import StateGuardedQuerySet
from runs.states import RUN_STATE_EVENTS, RunStatus, StepStatus


class Thread(models.Model):
    """A conversation: an owner's external ``thread_id`` and its ordered messages."""

    class Policy(models.TextChoices):
        QUEUE = "queue"
        INTERRUPT = "interrupt"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="threads",
    )
    thread_id = CheckedCharField(max_length=200)
    policy = CheckedCharField(max_length=16, choices=Policy.choices, default=Policy.QUEUE)
    #: Last allocated ``Message.seq``; bumped with UPDATE ... RETURNING so seqs are gap-free.
    message_seq = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # Lookup by (owner, thread_id) from the API and CLI; CLI threads have no owner.
            models.UniqueConstraint(
                fields=["owner", "thread_id"],
                condition=Q(owner__isnull=False),
                name="thread_unique_per_owner",
            ),
            models.UniqueConstraint(
                fields=["thread_id"],
                condition=Q(owner__isnull=True),
                name="thread_unique_ownerless",
            ),
        ]

    def __str__(self) -> str:
        return self.thread_id


class Run(models.Model):
    """One execution of a workflow (name + version) for one goal.

    ``version`` is the optimistic lock bumped by every status transition; ``event_seq``
    is the last allocated ``Event.seq`` (gap-free per run); ``generation`` is bumped when
    the run is resumed from an earlier checkpoint. Budget limits live in ``budget``
    (``{"model_calls": int, "tool_calls": int, "tokens": int, "cost_usd": str}``, a
    missing key means no limit); usage lives in the counters, cost in USD.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.PROTECT, related_name="runs")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="runs",
    )
    workflow = CheckedCharField(max_length=100)
    workflow_version = models.PositiveIntegerField()
    status = CheckedCharField(max_length=20, choices=RunStatus.choices, default=RunStatus.PENDING)
    version = models.PositiveIntegerField(default=0)
    generation = models.PositiveIntegerField(default=1)
    input = CheckedJSONField(default=dict)
    goal = CheckedTextField(blank=True, default="")
    budget = CheckedJSONField(default=dict, blank=True)
    model_calls = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    #: Input plus output tokens of the run's model responses.
    tokens = models.PositiveBigIntegerField(default=0)
    #: Model responses whose price is unknown: while > 0 the run's cost is unknown.
    unpriced_model_calls = models.PositiveIntegerField(default=0)
    #: The lab's one-shot fault injections, e.g. ``{"crash_before": "reply"}``: stored
    #: at start and read by the lab's hooks only (the engine never looks inside); on the
    #: run's row so that the hook points cost no extra round trip.
    faults = CheckedJSONField(
        default=dict,
        blank=True,
        help_text="The lab's one-shot fault injections (runs start --crash-before ...), "
        "read by its hooks only.",
    )
    #: The client's idempotency key; "" when the client sent none.
    request_id = CheckedCharField(max_length=200, blank=True, default="")
    request_fingerprint = CheckedCharField(max_length=64, blank=True, default="")
    #: The body of the first answer to the creating request (JSON), which a retry with
    #: the same key gets again; null without a key (and for runs from before it was kept).
    request_response = CheckedJSONField(null=True, blank=True, editable=False)
    current_step = models.ForeignKey(
        "Step", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    event_seq = models.PositiveIntegerField(default=0)
    error_code = CheckedCharField(max_length=64, blank=True, default="")
    error_detail = CheckedTextField(blank=True, default="")
    cancel_reason = CheckedTextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    #: A pause asked for while steps ran (``lifecycle.pause_run``): set until none of
    #: them runs any more and the run is PAUSED. No step of the run is claimed meanwhile.
    pause_requested_at = models.DateTimeField(null=True, blank=True)
    #: That request: ``{"reason", "actor"}``, and ``"resume"`` (the arguments of a
    #: resume from a checkpoint made once nothing runs) when a resume asked for it.
    pause_request = CheckedJSONField(default=dict, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True)
    #: Set by the watchdog when the run made no progress for too long; cleared on progress.
    stuck_since = models.DateTimeField(null=True, blank=True)
    #: Compensation of a failed or cancelled run (``runs.engine.effects.compensation``): "" (none
    #: needed yet), PENDING (to do or interrupted), DONE, or REVIEW (done, but some
    #: effects need a human: non-compensable or failed compensations).
    compensation_status = CheckedCharField(max_length=10, blank=True, default="")
    #: ``{"reason", "steps": [{"step", "status", "detail"}], "manual_review": [...]}``.
    compensation = CheckedJSONField(default=dict, blank=True)
    #: The finished run this one replays (``runs.engine.control.replay``), and the name
    #: of the original's checkpoint it started from; the original lists its replays
    #: through ``replays`` and is itself never changed.
    replay_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="replays"
    )
    replay_checkpoint = CheckedCharField(max_length=120, blank=True, default="")
    #: The run's concurrency key (``"<workflow>:<value from the input>"``, "" for none)
    #: and how many runs of one key may be in flight at once
    #: (``runs.engine.state.concurrency``); set at creation, never changed.
    concurrency_key = CheckedCharField(max_length=300, blank=True, default="")
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    #: A child run (``runs.engine.control.children``): the run and the step that started
    #: it, its position among that step's children (with the step, its idempotency key),
    #: and ``detached`` when it may outlive its parent (the step did not wait for it).
    parent_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    parent_step = models.ForeignKey(
        "Step", null=True, blank=True, on_delete=models.SET_NULL, related_name="child_runs"
    )
    child_position = models.PositiveIntegerField(null=True, blank=True)
    detached = models.BooleanField(default=False)
    objects = StateGuardedQuerySet.as_manager()

    class Meta:
        permissions = [
            # The console's operator role: cancel, re-dispatch, retry, resume, resolve.
            ("operate_run", "Can cancel, re-dispatch, retry, resume and resolve runs"),
        ]
        constraints = [
            # Client idempotency (API ``Idempotency-Key``): one run per owner and key.
            models.UniqueConstraint(
                fields=["owner", "request_id"],
                condition=~Q(request_id=""),
                name="run_request_id_unique_per_owner",
            ),
            # A step starts its child at a position once, whatever crashes in between.
            models.UniqueConstraint(
                fields=["parent_step", "child_position"],
                condition=Q(parent_step__isnull=False),
                name="run_child_unique_per_step_position",
            ),
        ]
        indexes = [
            # Console runs list and overview counts: filter by status, newest first.
            models.Index(fields=["status", "-created_at"], name="run_status_created"),
            # Watchdog: non-terminal runs ordered by their last event.
            models.Index(fields=["status", "last_event_at"], name="run_status_last_event"),
            # Thread page and ``runs status --thread``: latest run of a thread.
            models.Index(fields=["thread", "-created_at"], name="run_thread_created"),
            # Sweeper: runs whose compensation is PENDING (interrupted or not started).
            models.Index(fields=["compensation_status"], name="run_compensation_status"),
            # Overview per-run averages: runs created in the last day.
            models.Index(fields=["created_at"], name="run_created"),
            # Concurrency limits: runs of one key in flight, and those waiting in order.
            models.Index(
                fields=["concurrency_key", "status", "created_at"],
                condition=~Q(concurrency_key=""),
                name="run_concurrency_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow}@{self.workflow_version} {self.id}"

    @property
    def is_terminal(self) -> bool:
        from runs.states import RUN_TERMINAL

        return self.status in RUN_TERMINAL

    def usage(self) -> dict:
        """``{"model_calls": int, "tool_calls": int, "tokens": int, "cost_usd": str,
        "unpriced_model_calls": int}`` used so far, as read into this instance and as
        checkpoints keep it; ``cost_usd`` is the priced part."""
        return {
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "tokens": self.tokens,
            "cost_usd": str(self.cost_usd),
            "unpriced_model_calls": self.unpriced_model_calls,
        }


class Step(models.Model):
    """One retryable, observable unit of a run.

    ``attempt`` is the fencing token: every claim increments it, and heartbeats and result
    commits only apply while ``attempt`` still equals the claimer's number. ``lease_until``,
    ``not_before`` and ``notified_at`` are database-clock times.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    name = CheckedCharField(max_length=100)
    seq = models.PositiveIntegerField()
    generation = models.PositiveIntegerField(default=1)
    status = CheckedCharField(max_length=12, choices=StepStatus.choices, default=StepStatus.PENDING)
    attempt = models.PositiveIntegerField(default=0)
    #: The attempt count at the last human decision (resolve, budget raise): the retry
    #: policy counts attempts after it, so a human's "go on" gets a fresh allowance
    #: while ``attempt`` stays the monotonic fencing token.
    attempt_base = models.PositiveIntegerField(default=0)
    owner = CheckedCharField(max_length=200, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    not_before = models.DateTimeField(db_default=Now())
    notified_at = models.DateTimeField(null=True, blank=True)
    #: The signal a WAITING step waits for (empty for any other wait), and until when
    #: (database clock; null: no timeout).
    signal_name = CheckedCharField(max_length=100, blank=True, default="", db_default="")
    wait_until = models.DateTimeField(null=True, blank=True)
    input = CheckedJSONField(default=dict, blank=True)
    output = PayloadJSONField(null=True, blank=True)
    input_artifact = models.ForeignKey(
        "Artifact", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    output_artifact = models.ForeignKey(
        "Artifact", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    error_code = CheckedCharField(max_length=64, blank=True, default="")
    error_detail = CheckedTextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: A branch of a map step: the map step's row that fanned out (WAITING until its
    #: branches finish) and this branch's position in its list of items (0-based; the
    #: item is ``input["item"]``). Both null for every other step.
    branch_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="branches"
    )
    position = models.PositiveIntegerField(null=True, blank=True)
    #: The step's concurrency key (``"<workflow>.<step>:<value from the input>"``; null
    #: for a step without one) and how many steps of one key may be RUNNING at once
    #: (``runs.engine.state.concurrency``); set when the step is scheduled.
    concurrency_key = CheckedCharField(max_length=300, null=True, blank=True)
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    objects = StateGuardedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="step_unique_seq_per_run"),
            # One branch per position of a fan-out; the join reads the results in this
            # order.
            models.UniqueConstraint(
                fields=["branch_of", "position"],
                condition=Q(branch_of__isnull=False),
                name="step_unique_branch_position",
            ),
        ]
        indexes = [
            # Database-polling dispatch and the sweeper's lost-notification query:
            # PENDING steps due by not_before.
            models.Index(fields=["status", "not_before"], name="step_status_not_before"),
            # Sweeper's expired-lease query: RUNNING steps by lease_until.
            models.Index(fields=["status", "lease_until"], name="step_status_lease"),
            # Overview step durations: steps that succeeded in the last day, newest first.
            models.Index(fields=["status", "-finished_at"], name="step_status_finished"),
            # A branch's commit asks whether a sibling is still open, and the run page
            # counts a fan-out's branches by status.
            models.Index(
                fields=["branch_of", "status"],
                condition=Q(branch_of__isnull=False),
                name="step_branch_status",
            ),
            # A keyed step's claim counts the RUNNING steps of its key and the older
            # PENDING ones.
            models.Index(
                fields=["concurrency_key", "status"],
                condition=Q(concurrency_key__isnull=False),
                name="step_concurrency_key",
            ),
        ]
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"{self.name}#{self.seq} ({self.status}, attempt {self.attempt})"


class AttemptLog(models.Model):
    """What one attempt of a step wrote while its code ran: its ``logging`` records and
    its stdout/stderr, the newest ``AGENTOPS_ATTEMPT_LOG_BYTES`` bytes of it (UTF-8) in
    ``text``; ``truncated`` when older output was cut and ``total_bytes`` how much was
    written in all. Untrusted text: agent and tool output."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempt_logs")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="attempt_logs")
    attempt = models.PositiveIntegerField()
    text = models.TextField(blank=True, default="")
    truncated = models.BooleanField(default=False)
    total_bytes = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["step", "attempt"], name="attempt_log_unique"),
        ]

    def __str__(self) -> str:
        return f"log of step {self.step_id} attempt {self.attempt} ({self.total_bytes} bytes)"


class Message(models.Model):
    """A structured chat record of a thread, in ``seq`` order.

    ``tool_calls`` is a list of ``{"id", "name", "arguments"}``; a tool result carries the
    ``tool_call_id`` of the call it answers. ``message_id`` is stable and client-visible.
    """

    class Role(models.TextChoices):
        SYSTEM = "system"
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"

    class Status(models.TextChoices):
        DRAFT = "draft"
        FINAL = "final"
        SUPERSEDED = "superseded"
        #: A user message that arrived while another run of the thread was in progress
        #: (thread policy): it has no ``seq`` yet and gets one when its run starts.
        QUEUED = "queued"

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.CASCADE, related_name="messages"
    )
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages"
    )
    #: Position in the thread, gap-free; ``None`` only while the message is QUEUED.
    seq = models.PositiveIntegerField(null=True, blank=True)
    message_id = CheckedCharField(max_length=64, unique=True)
    role = CheckedCharField(max_length=12, choices=Role.choices)
    content = CheckedTextField(blank=True, default="")
    tool_calls = CheckedJSONField(default=list, blank=True)
    tool_call_id = CheckedCharField(max_length=64, blank=True, default="")
    status = CheckedCharField(max_length=12, choices=Status.choices, default=Status.FINAL)
    #: The client's request id for a resent message; "" when the client sent none.
    request_id = CheckedCharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["thread", "seq"], name="message_unique_seq_per_thread"),
            # A client's resent message with the same request id is stored once.
            models.UniqueConstraint(
                fields=["thread", "request_id"],
                condition=~Q(request_id=""),
                name="message_request_id_unique",
            ),
        ]
        ordering = ["thread", "seq"]

    def __str__(self) -> str:
        return f"{self.message_id} ({self.role}, seq {self.seq})"

    def as_dict(self) -> dict:
        """The client-visible shape: ``{id, role, content, tool_calls, tool_call_id}``."""
        return {
            "id": self.message_id,
            "role": self.role,
            "content": self.content,
            "tool_calls": self.tool_calls or [],
            "tool_call_id": self.tool_call_id or None,
        }


class Summary(models.Model):
    """A stored summary of a thread's older history, covering messages
    ``first_seq..last_seq`` (inclusive; summaries are cumulative, so ``first_seq`` is 1).

    Written by a workflow step in its fenced commit (``StepContext.add_summary``), so a
    crash while summarising is recovered like any step. ``tokens`` is the summary's size
    by the configured token counter; ``covered_tokens`` the size of what it replaces.
    """

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="summaries")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    first_seq = models.PositiveIntegerField()
    last_seq = models.PositiveIntegerField()
    content = CheckedTextField()
    tokens = models.PositiveIntegerField(default=0)
    covered_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # One summary per covered range: a re-run summarising step cannot add a twin.
            models.UniqueConstraint(fields=["thread", "last_seq"], name="summary_unique_range"),
        ]

    def __str__(self) -> str:
        return f"summary {self.first_seq}..{self.last_seq}"


class Artifact(models.Model):
    """A durable output file of a step: written to storage first, then this row."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="artifacts")
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="artifacts"
    )
    kind = CheckedCharField(max_length=50)
    name = CheckedCharField(max_length=200)
    uri = CheckedCharField(max_length=500)
    checksum = CheckedCharField(max_length=64, help_text="sha256 hex digest")
    size = models.PositiveBigIntegerField(help_text="bytes")
    metadata = CheckedJSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"{self.name} ({self.size} bytes)"


class Event(models.Model):
    """Append-only log of a run; ``seq`` is gap-free per run and is the SSE event id."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    seq = models.PositiveIntegerField()
    type = CheckedCharField(max_length=64)
    payload = CheckedJSONField(default=dict, blank=True)
    actor = CheckedCharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # Timeline and SSE replay read a run's events by seq; also forbids duplicates.
            models.UniqueConstraint(fields=["run", "seq"], name="event_unique_seq_per_run"),
        ]
        indexes = [
            # Overview and metrics count events of a type over a time window.
            models.Index(fields=["type", "created_at"], name="event_type_created"),
            # Console audit log: operator events ("user:..." / "cli" actors), newest first.
            models.Index(fields=["actor", "-created_at"], name="event_actor_created"),
            # Overview time in state: the latest run-state event of each open run (one
            # index probe per run instead of a walk over its whole log).
            models.Index(
                fields=["run", "-seq"],
                condition=Q(type__in=RUN_STATE_EVENTS),
                name="event_run_state_latest",
            ),
        ]
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"#{self.seq} {self.type}"


class Checkpoint(models.Model):
    """The minimum state to resume a run from.

    ``state`` is ``{"phase": next step name or None, "input", "completed": [names],
    "outputs": {step: output}, "message_seq": int, "artifacts": [ids], "budget_used",
    "workflow", "workflow_version", "generation", "next_allowed": [names]}``.

    Stored as ``data``: the whole state when ``base`` is empty (``version`` 1), else
    only what changed since ``base`` (``version`` 2: ``{"set": {key: value}, "unset":
    [keys], "outputs": {step: output}, "completed": [names appended]}``), so a run's
    checkpoints grow linearly with its length. Reading ``state`` rebuilds the whole
    state along the ``base`` chain in one query (``runs.engine.state.checkpoints``);
    assigning it stores a whole state.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = CheckedCharField(max_length=120)
    generation = models.PositiveIntegerField(default=1)
    #: Shape of ``data``: 1 a whole state, 2 a delta on ``base``.
    version = models.PositiveIntegerField(default=1)
    #: The checkpoint this one's delta applies to: it cannot be deleted alone, only with
    #: its run (RESTRICT lets a run's cascade take the whole chain).
    base = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.RESTRICT, related_name="+"
    )
    data = PayloadJSONField(default=dict, db_column="state")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # Latest checkpoint of a run (step context, resume).
            models.Index(fields=["run", "-id"], name="checkpoint_run_latest"),
        ]

    def __str__(self) -> str:
        return f"{self.name} (gen {self.generation})"

    @property
    def state(self) -> dict:
        """The whole state at this checkpoint (rebuilt once per instance)."""
        cached = self.__dict__.get("_whole_state")
        if cached is None:
            from runs.checkpoint_data import materialize

            cached = self.__dict__["_whole_state"] = materialize(self)
        return cached

    @state.setter
    def state(self, value: dict) -> None:
        self.data = value
        self.base = None
        self.version = 1
        self.__dict__["_whole_state"] = value


class Operation(models.Model):
    """The side-effect ledger: one row per business action, keyed by ``idempotency_key``.

    The INTENT row is committed before the outside call and the result after it, so an
    INTENT found by a later attempt means the outcome is unknown until verified.
    """

    class Status(models.TextChoices):
        INTENT = "INTENT"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"
        UNKNOWN = "UNKNOWN"
        COMPENSATED = "COMPENSATED"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="operations")
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="operations"
    )
    idempotency_key = CheckedCharField(max_length=200, unique=True)
    tool = CheckedCharField(max_length=100)
    side_effect = CheckedCharField(max_length=12, default="read")
    arguments = CheckedJSONField(default=dict, blank=True)
    status = CheckedCharField(max_length=12, choices=Status.choices, default=Status.INTENT)
    result = PayloadJSONField(null=True, blank=True)
    external_ref = CheckedCharField(max_length=200, blank=True, default="")
    attempt = models.PositiveIntegerField(default=0)
    #: The SUCCEEDED operation whose recorded result this row carries over into a resumed
    #: generation or a replay (``runs.engine.control.reuse``): the call is not made again.
    reused_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    objects = StateGuardedQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.tool} {self.idempotency_key} ({self.status})"


class WorkerProcess(models.Model):
    """A live (or recently stopped) worker process, for the console's workers page."""

    worker_id = CheckedCharField(max_length=200, unique=True)
    host = CheckedCharField(max_length=200)
    pid = models.PositiveIntegerField()
    mode = CheckedCharField(max_length=8, help_text="rq or db (database polling)")
    queues = CheckedCharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField(db_default=Now())
    heartbeat_at = models.DateTimeField(db_default=Now())
    stopped_at = models.DateTimeField(null=True, blank=True)
    #: How peers learn that this worker died (``runs.engine.execution.liveness``):
    #: "pg" (it holds a session advisory lock keyed by its pk), "pid" (same host, the
    #: pid is checked), or "" (no signal: only the lease decides).
    liveness = CheckedCharField(max_length=8, blank=True, default="")

    # Not columns: ``runs.console.workforce`` sets these on the rows it lists.
    #: The RUNNING steps this worker holds, by lease end.
    held_steps: list["Step"]
    #: True when its heartbeat is older than the silence threshold.
    silent: bool
    #: Seconds since its last heartbeat, on the database clock.
    heartbeat_age: float
    #: Why it is listed as dead ("" while live).
    dead_reason: str

    def __str__(self) -> str:
        return self.worker_id


class MaintenanceLease(models.Model):
    """A named lease so only one process runs a maintenance job (the sweeper) at a time."""

    name = CheckedCharField(max_length=50, primary_key=True)
    owner = CheckedCharField(max_length=200, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} (owner {self.owner or '-'}, until {self.lease_until})"


class ActionRequest(models.Model):
    """A state-changing API request made with an ``Idempotency-Key``: the key is claimed
    (row inserted) before the action runs and the response stored after it, so a retry
    or a concurrent duplicate gets the first response instead of acting again.

    ``status_code`` is null while the first request is still running.
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="action_requests"
    )
    key = CheckedCharField(max_length=200)
    #: sha256 hex of the method, path and canonical JSON body.
    fingerprint = CheckedCharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = CheckedJSONField(null=True, blank=True)
    etag = CheckedCharField(max_length=60, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # Decides which of concurrent requests with one key acts; lookup on replay.
            models.UniqueConstraint(fields=["owner", "key"], name="action_request_unique_key"),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.status_code or 'in progress'})"


class RefusedAction(models.Model):
    """The audit record of an action refused with 403 or 409, from the console or the API:
    who (``actor``), what (``action``: method and path), on what (``target``: the run,
    approval or takeover id), and why (``code`` and ``reason``)."""

    actor = CheckedCharField(max_length=200)
    channel = CheckedCharField(max_length=8, help_text="api or console")
    action = CheckedCharField(max_length=300)
    target = CheckedCharField(max_length=200, blank=True, default="")
    status_code = models.PositiveSmallIntegerField()
    code = CheckedCharField(max_length=64, blank=True, default="")
    reason = CheckedTextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # Console audit log: refusals newest first, optionally of one actor.
            models.Index(fields=["-created_at"], name="refused_action_created"),
            models.Index(fields=["actor", "-created_at"], name="refused_action_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action}: {self.status_code} {self.code}"


class Payload(models.Model):
    """A large string that a run's ledger results, step outputs and checkpoints share:
    stored once per run, referenced by its sha256 (``runs.payload_field``)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="payloads")
    digest = CheckedCharField(max_length=64, help_text="sha256 hex of the UTF-8 text")
    text = CheckedTextField()
    size = models.PositiveBigIntegerField(help_text="bytes (UTF-8)")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # One copy per run; concurrent writers of the same payload insert it once.
            models.UniqueConstraint(fields=["run", "digest"], name="payload_unique_per_run"),
        ]
        indexes = [
            # Reading a row resolves its references by digest alone.
            models.Index(fields=["digest"], name="payload_digest"),
        ]

    def __str__(self) -> str:
        return f"{self.digest[:12]} ({self.size} bytes)"


class Signal(models.Model):
    """A named message to a run from outside (CLI, API, console, webhook), with a JSON
    ``payload``. ``request_id`` is the sender's idempotency key: one row per
    (run, name, request_id), so a repeated delivery finds the first. A signal that comes
    before the run waits for it stays unconsumed (``step`` null) until a step waiting for
    ``name`` takes it, oldest first."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="signals")
    name = CheckedCharField(max_length=100)
    request_id = CheckedCharField(max_length=200)
    payload = CheckedJSONField(default=dict, blank=True)
    actor = CheckedCharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    #: The step that consumed it and when (both null while it is kept for a later wait).
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="signals"
    )
    consumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # Decides which of concurrent deliveries with one request id is the signal.
            models.UniqueConstraint(
                fields=["run", "name", "request_id"], name="signal_unique_request"
            ),
        ]
        indexes = [
            # A wait's look-up of the oldest kept signal of its name.
            models.Index(
                fields=["run", "name", "created_at"],
                condition=Q(consumed_at__isnull=True),
                name="signal_kept",
            ),
        ]
        ordering = ["run", "created_at", "pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.request_id})"


class Schedule(models.Model):
    """Starts runs of ``workflow`` with ``input`` on a cron expression (in ``timezone``)
    or every ``every_seconds``. ``next_fire_at`` is the next tick not handled yet
    (database clock); ``overlap`` and ``catchup`` say what a tick does while the
    previous run is open and after downtime."""

    class Overlap(models.TextChoices):
        SKIP = "skip"
        ALLOW = "allow"

    class Catchup(models.TextChoices):
        NONE = "none"
        LATEST = "latest"
        ALL = "all"

    name = CheckedCharField(max_length=100, unique=True)
    workflow = CheckedCharField(max_length=100)
    input = CheckedJSONField(default=dict, blank=True)
    cron = CheckedCharField(max_length=200, blank=True, default="")
    timezone = CheckedCharField(max_length=64, default="UTC")
    every_seconds = models.PositiveIntegerField(null=True, blank=True)
    overlap = CheckedCharField(max_length=8, choices=Overlap.choices, default=Overlap.SKIP)
    catchup = CheckedCharField(max_length=8, choices=Catchup.choices, default=Catchup.LATEST)
    #: How far back ``catchup=all`` starts missed ticks, in seconds.
    catchup_window = models.PositiveIntegerField(default=3600)
    paused = models.BooleanField(default=False)
    next_fire_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # The sweeper's due-schedules query.
            models.Index(fields=["next_fire_at"], condition=Q(paused=False), name="schedule_due"),
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ScheduleTick(models.Model):
    """One tick of a schedule: its nominal time ``tick_at`` is the unique key that makes
    any number of sweepers and workers handle it once. ``outcome``: ``started`` (``run``
    set), ``skipped`` (the previous run was open and overlap is skip), ``missed`` (left
    out by the catch-up policy) or ``failed`` (the run could not start: ``detail``)."""

    class Outcome(models.TextChoices):
        STARTED = "started"
        SKIPPED = "skipped"
        MISSED = "missed"
        FAILED = "failed"

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="ticks")
    tick_at = models.DateTimeField()
    outcome = CheckedCharField(max_length=8, choices=Outcome.choices)
    #: ``True`` for "trigger now" (an operator), ``False`` for a tick of the timetable.
    manual = models.BooleanField(default=False)
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="schedule_ticks"
    )
    detail = CheckedTextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # One tick, one row, whoever fires it.
            models.UniqueConstraint(fields=["schedule", "tick_at"], name="schedule_tick_unique"),
        ]
        ordering = ["schedule", "-tick_at"]

    def __str__(self) -> str:
        return f"{self.schedule_id}@{self.tick_at:%Y-%m-%dT%H:%M:%S} {self.outcome}"


class RateLimit(models.Model):
    """A named rate limit set in the admin (``runs.engine.effects.rate_limits``): at most
    ``requests`` calls and ``tokens`` tokens (empty: no bound, at least one is set) in
    any ``window_seconds``. A row overrides ``AGENTOPS_RATE_LIMITS``' limit of its name
    and takes effect at the next call, on every worker."""

    name = models.CharField(max_length=100, primary_key=True)
    requests = models.PositiveIntegerField(null=True, blank=True)
    tokens = models.PositiveBigIntegerField(null=True, blank=True)
    window_seconds = models.FloatField(default=60.0)

    def __str__(self) -> str:
        bounds = f"{self.requests} requests, {self.tokens} tokens"
        return f"{self.name}: {bounds} per {self.window_seconds} s"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        errors = {}
        if self.requests is None and self.tokens is None:
            errors["requests"] = "Set requests, tokens or both."
        if self.requests == 0:
            errors["requests"] = "Must be at least 1 (leave empty for no bound)."
        if self.tokens == 0:
            errors["tokens"] = "Must be at least 1 (leave empty for no bound)."
        if not 0 < self.window_seconds <= 86400:
            errors["window_seconds"] = "Must be seconds above 0, at most 86400."
        if errors:
            raise ValidationError(errors)


class RateLimitCall(models.Model):
    """One call counted against the rate limit ``name`` (``runs.engine.effects.rate_limits``).

    A granted call (``waiting`` false) counts while it is in flight (``finished``
    false, as long as its attempt holds its step's lease) and then for one window from
    ``at``, the call's end, so a window never holds more calls than the limit however
    long each takes to reach the provider; ``tokens`` are the call's, known at its end.
    A waiting row (``waiting`` true) marks the attempt ``(step, attempt)`` that waits for
    the limit, for the console and ``/metrics``; it is removed when the call is granted.
    """

    name = models.CharField(max_length=100)
    at = models.DateTimeField(db_default=Now())
    tokens = models.PositiveBigIntegerField(default=0)
    waiting = models.BooleanField(default=False)
    finished = models.BooleanField(default=False)
    step = models.ForeignKey(Step, null=True, blank=True, on_delete=models.CASCADE)
    attempt = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            # The grant: calls of one limit in its window, and the old ones pruned.
            models.Index(fields=["name", "at"], name="rate_call_name_at"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {'waiting' if self.waiting else 'granted'} {self.at}"


class RateLimitHold(models.Model):
    """A provider's answer 429 with ``Retry-After``: no call counted against the limit
    ``name`` is granted before ``until`` (database time)."""

    name = models.CharField(max_length=100, primary_key=True)
    until = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} held until {self.until}"


class Approval(models.Model):
    """A question to an approver that a run waits on (run status WAITING_APPROVAL).

    ``routes`` is ``{"approve": step or None, "reject": step or None, "expire": step or
    None}``, fixed by the worker that asked (it knew the workflow), so a decision needs
    no workflow code. CANCELLED: the run was cancelled or resumed elsewhere meanwhile.
    """

    class Status(models.TextChoices):
        PENDING = "PENDING"
        APPROVED = "APPROVED"
        REJECTED = "REJECTED"
        EXPIRED = "EXPIRED"
        CANCELLED = "CANCELLED"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="approvals")
    question = CheckedTextField()
    reason = CheckedTextField(blank=True, default="")
    evidence = CheckedJSONField(default=dict, blank=True)
    status = CheckedCharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = CheckedTextField(blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    routes = CheckedJSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    objects = StateGuardedQuerySet.as_manager()

    class Meta:
        # The table keeps the name it had when the approvals app held the model.
        db_table = "approvals_approval"
        permissions = [("decide_approval", "Can approve or reject approval requests")]
        indexes = [
            # Approvals inbox and the sweeper's expiry query: pending ones by age / expiry.
            models.Index(fields=["status", "expires_at"], name="approval_status_expiry"),
        ]

    def __str__(self) -> str:
        return f"approval {self.pk} ({self.status})"


class Takeover(models.Model):
    """A run paused for a human: why, what was done, where it failed, what to do next."""

    class Status(models.TextChoices):
        OPEN = "OPEN"
        RESOLVED = "RESOLVED"

    class Cause(models.TextChoices):
        UNKNOWN_OUTCOME = "unknown_outcome"
        RETRIES_EXHAUSTED = "retries_exhausted"
        BUDGET_EXHAUSTED = "budget_exhausted"
        UNKNOWN_WORKFLOW_VERSION = "unknown_workflow_version"
        ARTIFACT_INVALID = "artifact_invalid"
        OPERATOR_REQUEST = "operator_request"
        NON_DETERMINISM = "non_determinism"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="takeovers")
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="takeovers"
    )
    cause = CheckedCharField(max_length=40, choices=Cause.choices)
    reason = CheckedTextField()
    done_summary = CheckedJSONField(default=dict, blank=True)
    failed_at = CheckedCharField(max_length=200, blank=True, default="")
    suggested_action = CheckedTextField(blank=True, default="")
    evidence = CheckedJSONField(default=dict, blank=True)
    checkpoints = CheckedJSONField(default=list, blank=True)
    status = CheckedCharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    resolution = CheckedCharField(max_length=40, blank=True, default="")
    resolution_note = CheckedTextField(blank=True, default="")
    resolved_by = CheckedCharField(max_length=200, blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    objects = StateGuardedQuerySet.as_manager()

    class Meta:
        # The table keeps the name it had when the approvals app held the model.
        db_table = "approvals_takeover"
        constraints = [
            # One open takeover per run: a second pause reason updates the open one.
            models.UniqueConstraint(
                fields=["run"], condition=Q(status="OPEN"), name="takeover_one_open_per_run"
            ),
        ]

    def __str__(self) -> str:
        return f"takeover {self.pk} ({self.cause}, {self.status})"
