"""Request and response shapes of the API (pydantic through django-ninja); they are
the OpenAPI schema. Request bodies forbid unknown fields and use strict types, so a
string where a number belongs is a 422, not a silent conversion."""

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import ConfigDict, Field, StrictBool, StrictInt, StrictStr

from approvals.services import MAX_COMMENT_CHARS, MAX_MESSAGE_CHARS
from runs.engine.service import (
    COST_PLACES,
    MAX_AMOUNTS,
    MAX_CHARS,
    MAX_EVIDENCE_CHARS,
    MAX_REASON_CHARS,
)


class Strict(Schema):
    """A request body: unknown fields refused, types strict. Lengths and characters of
    its text are not checked here: the engine's rules refuse them with the same code
    on every face (``runs.engine.rules``; 422 ``invalid_input``, ``invalid_thread``,
    ``reason_required``...)."""

    model_config = ConfigDict(extra="forbid")


#: Every reason field, described with its bounds in the OpenAPI document; not checked
#: here: the engine refuses a blank one as reason_required, a long one as invalid_input.
REASON = (
    f"why: 1..{MAX_REASON_CHARS} characters (422 reason_required when blank, "
    "invalid_input when longer)"
)
REASON_BOUNDS: dict[str, Any] = {"minLength": 1, "maxLength": MAX_REASON_CHARS}


class Error(Schema):
    """Every 4xx body."""

    code: str = Field(description="stable machine-readable code, e.g. idempotency_key_reused")
    message: str
    errors: dict[str, str] = Field(description="field (dotted path) -> what is wrong")


def _count(key: str) -> str:
    """How the count ``key``'s bounds are described; the engine checks them."""
    return f"whole number, 0..{int(MAX_AMOUNTS[key])} (422 invalid_budget otherwise)"


#: How a USD amount's bounds are described; the engine checks them.
COST = (
    f'USD, as a string like "0.10" or a number, 0..{MAX_AMOUNTS["cost_usd"]} with at most '
    f"{COST_PLACES} decimal places (422 invalid_budget otherwise)"
)


class BudgetIn(Strict):
    """Limits for the run; an omitted limit means none. The amounts are taken as sent
    and checked by the engine (``runs.engine.effects.budget.parse_amount``: bounds
    ``MAX_AMOUNTS``), so a bad one is 422 ``invalid_budget`` as on every face."""

    model_calls: Any = Field(None, description=_count("model_calls"))
    tool_calls: Any = Field(None, description=_count("tool_calls"))
    tokens: Any = Field(None, description="input + output tokens; " + _count("tokens"))
    cost_usd: Any = Field(None, description=COST)


class RunCreate(Strict):
    workflow: StrictStr = Field(examples=["room_temperature"])
    thread_id: StrictStr = Field(
        examples=["t1"], description=f"1..{MAX_CHARS['thread_id']} characters, no controls"
    )
    input: dict[str, Any] = Field(examples=[{"question": "How warm is the living room?"}])
    budget: BudgetIn | None = None


class Attempt(Schema):
    attempt: int = Field(description="the attempt number (its fencing token)")
    worker: str | None
    outcome: str | None = Field(
        description="the event type that ended this attempt (step.succeeded, "
        "lease.owner_dead, step.waiting, step.commit_rejected, ...); null while it runs"
    )
    result: str = Field(
        description="how it ended in one word: running, succeeded, failed, lost, waited, "
        "fenced, unknown, cancelled, budget_exhausted, given_back or superseded"
    )
    error_code: str | None
    error_detail: str | None
    taken_over_by: str | None = Field(
        description="the worker of the next attempt, when this one was lost"
    )
    started_at: datetime | None
    ended_at: datetime | None


class StepOut(Schema):
    id: int
    name: str
    seq: int
    generation: int
    status: str
    attempt: int = Field(description="attempts claimed so far (the fencing token)")
    error_code: str | None
    error_detail: str | None
    started_at: datetime | None
    finished_at: datetime | None
    attempts: list[Attempt]
    # Defaults: a response stored for an idempotency key before these fields existed
    # is answered again as it was.
    branch_of: int | None = Field(
        None, description="a branch of a map step: the id of the map step that fanned out"
    )
    position: int | None = Field(
        None, description="a branch's position in the map step's items (0-based); null otherwise"
    )


class AttemptLogOut(Schema):
    step_id: int
    attempt: int
    text: str = Field(description="the newest bytes the attempt logged and printed (UTF-8)")
    truncated: bool = Field(description="older output was cut")
    total_bytes: int = Field(description="bytes the attempt wrote in all")
    created_at: datetime


class Usage(Schema):
    model_calls: int
    tool_calls: int
    tokens: int
    cost_usd: str | None = Field(
        description="USD; null (unknown) while a model call had no price, never 0"
    )
    cost_usd_priced: str = Field(description="USD of the model calls with a known price")
    unpriced_model_calls: int


class Budget(Schema):
    limits: dict[str, Any]
    used: Usage


class RunSummary(Schema):
    id: UUID
    etag: str = Field(
        description="the run's entity tag: send it as If-Match with an action on the run"
    )
    thread_id: str
    workflow: str
    workflow_version: int
    status: str
    generation: int
    goal: str
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    error_code: str | None
    last_event_seq: int
    replay_of: UUID | None = Field(description="the finished run this one replays")
    replay_checkpoint: str | None = Field(description="the original's checkpoint it starts from")
    parent_run: UUID | None = Field(description="the run whose step started this child run")


class ParentOut(Schema):
    run: UUID
    step: str | None = Field(description="the parent's step that started this run")
    position: int | None = Field(description="this run's position among the step's children")
    detached: bool = Field(description="may outlive its parent (the step did not wait)")


class ChildOut(Schema):
    id: UUID
    workflow: str
    status: str
    step: str | None = Field(description="the step that started it")
    position: int | None
    detached: bool
    error_code: str | None


class RunOut(RunSummary):
    # A default: a response stored for an idempotency key before the field existed is
    # answered again as it was.
    error_detail: str | None = Field(
        None, description="why the run failed (untrusted text: the failing step's error)"
    )
    input: dict[str, Any] = Field(description="the input the run was started with, unchanged")
    effective_input: dict[str, Any] = Field(
        description="the input the run works with now: `input` with the `input_patch` of "
        "every resume applied (equal to `input` until a resume patches it)"
    )
    next_step: str | None
    current_step: str | None
    budget: Budget
    steps: list[StepOut] = Field(
        description="the newest 100 steps, oldest first; GET /runs/{id}/steps pages all"
    )
    steps_total: int = Field(description="how many steps the run has (all generations)")
    replays: list[UUID] = Field(description="runs that replay this one, oldest first")
    parent: ParentOut | None = Field(description="the run and step that started this child run")
    children: list[ChildOut] = Field(
        description="the first 100 child runs this run started, by step and position; "
        "GET /runs?parent={id} pages all"
    )
    children_total: int = Field(description="how many child runs this run started")
    pause_progress: str | None = Field(
        description="while a pause is requested and steps still run, where it stands: "
        "`pause requested, waiting for the running steps (4 running)`; null otherwise"
    )


class StepPage(Schema):
    items: list[StepOut]
    next_after_seq: int | None = Field(
        description="pass as `after_seq` for the next page; null on the last page"
    )


class RunPage(Schema):
    items: list[RunSummary]
    count: int
    limit: int
    offset: int


class EventOut(Schema):
    seq: int
    type: str
    step: str | None
    step_id: int | None
    actor: str
    payload: dict[str, Any]
    created_at: datetime


class EventPage(Schema):
    items: list[EventOut]
    run_status: str
    last_seq: int = Field(description="the run's last event seq; pass it as `after` to poll on")


class MessageOut(Schema):
    id: str
    seq: int
    role: str
    content: str
    tool_calls: list[Any]
    tool_call_id: str | None
    status: Literal["draft", "final", "superseded"]
    run_id: UUID | None
    created_at: datetime


class CheckpointOut(Schema):
    id: int = Field(description="pass the last one as `after` for the next page")
    name: str = Field(description="unique in the run: a repeated name gets #<step seq>")
    generation: int
    step: str | None
    next_step: str | None
    resumable: bool
    created_at: datetime


class CheckpointRef(Schema):
    id: int
    name: str
    generation: int


class ResumePreview(Schema):
    checkpoint: CheckpointRef
    steps_to_rerun: list[str]
    reexecute: bool = Field(description="the recorded side effects are made again")
    operations_reused: list[dict[str, Any]] = Field(
        description="side effects recorded SUCCEEDED after the checkpoint whose results are "
        "reused (not called again), each with its recorded result"
    )
    operations_may_repeat: list[dict[str, Any]]
    steps_to_supersede: list[dict[str, Any]]
    input: dict[str, Any]


class CancelIn(Strict):
    reason: StrictStr = Field(description=REASON, json_schema_extra=REASON_BOUNDS)


class ResumeIn(Strict):
    checkpoint: StrictStr
    input_patch: dict[str, Any] | None = None
    reason: StrictStr = Field(description=REASON, json_schema_extra=REASON_BOUNDS)
    reexecute: StrictBool = Field(
        False,
        description="make the side effects recorded after the checkpoint again instead of "
        "reusing their results",
    )


class ReplayIn(Strict):
    checkpoint: StrictStr | None = Field(
        None, description="default: the last checkpoint before the failed (or cancelled) step"
    )
    reason: StrictStr = Field(description=REASON, json_schema_extra=REASON_BOUNDS)
    reexecute: StrictBool = Field(
        False, description="make the recorded side effects again instead of reusing them"
    )
    again: StrictBool = Field(False, description="replay a run that was replayed before")
    dry_run: StrictBool = Field(False, description="preview only; changes nothing")


class ReplayPreview(Schema):
    run: UUID
    status: str
    checkpoint: CheckpointRef
    steps_to_run: list[str]
    steps_replaced: list[dict[str, Any]]
    reexecute: bool
    operations_reused: list[dict[str, Any]] = Field(
        description="side effects recorded SUCCEEDED after the checkpoint whose results the "
        "replay reuses, each with its recorded result"
    )
    operations_may_repeat: list[dict[str, Any]]
    replays: list[UUID] = Field(description="replays the run already has")


class ReplayOut(Schema):
    dry_run: bool
    preview: ReplayPreview
    replay: RunOut | None = Field(description="the new run (null for a dry run)")


class BulkReplayIn(Strict):
    """Which finished runs to replay (each from the last checkpoint before its failed
    step) and how fast."""

    status: Literal["FAILED", "CANCELLED", "SUCCEEDED"] = "FAILED"
    workflow: StrictStr | None = None
    error_code: StrictStr | None = None
    since: datetime | None = Field(None, description="created at or after (ISO time)")
    rate: float = Field(
        5.0, gt=0, le=1000, allow_inf_nan=False, description="replays started per second"
    )
    again: StrictBool = Field(False, description="also runs replayed before")
    reexecute: StrictBool = False
    dry_run: StrictBool = False
    limit: StrictInt = Field(500, ge=1, le=1000)
    reason: StrictStr = Field(description=REASON, json_schema_extra=REASON_BOUNDS)


class BulkReplayed(Schema):
    run: UUID
    replay: UUID
    start_after_s: float = Field(description="seconds after the request the replay starts")


class BulkSkipped(Schema):
    run: UUID
    code: str
    message: str


class BulkReplayOut(Schema):
    dry_run: bool
    rate: float
    created: list[BulkReplayed]
    skipped: list[BulkSkipped]
    previews: list[ReplayPreview]


class RetryIn(Strict):
    reason: StrictStr = Field(description=REASON, json_schema_extra=REASON_BOUNDS)
    #: Retry an unknown outcome although the latest verify answer says it happened.
    against_verify: StrictBool = False


class BudgetRaiseIn(Strict):
    """Amounts to add; at least one must be positive. Taken as sent and checked by the
    engine as ``BudgetIn``'s (422 ``invalid_budget``)."""

    reason: StrictStr = Field(description=REASON, json_schema_extra=REASON_BOUNDS)
    add_model_calls: Any = Field(0, description=_count("model_calls"))
    add_tool_calls: Any = Field(0, description=_count("tool_calls"))
    add_tokens: Any = Field(0, description=_count("tokens"))
    add_cost_usd: Any = Field("0", description=COST)


class ResolveIn(Strict):
    outcome: Literal["done", "not-done"]
    evidence: StrictStr = Field(
        description=f"what you checked: 1..{MAX_EVIDENCE_CHARS} characters (422 "
        "evidence_required when blank, invalid_input when longer)"
    )
    result: Any = None
    #: Resolve although the latest verify answer says the opposite (recorded).
    against_verify: StrictBool = False


class ApprovalOut(Schema):
    id: int
    run_id: UUID
    step: str
    question: str
    reason: str
    evidence: dict[str, Any]
    status: str
    decided_by: str | None
    decided_at: datetime | None
    comment: str
    expires_at: datetime | None
    created_at: datetime


class DecideIn(Strict):
    decision: StrictStr = Field(
        description="approve or reject (another word: 422 invalid_decision, as on every face)"
    )
    comment: StrictStr = Field("", description=f"at most {MAX_COMMENT_CHARS} characters")
    #: An agent's tool call only: approve with these arguments instead (validated
    #: against the tool's schema: 422 ``invalid_arguments`` with field errors).
    arguments: dict[str, Any] | None = None
    #: An agent's tool call only: reject and let the model read this instead.
    message: StrictStr = Field("", description=f"at most {MAX_MESSAGE_CHARS} characters")
