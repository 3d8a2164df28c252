"""Request and response shapes of the API (pydantic through django-ninja); they are
the OpenAPI schema. Request bodies forbid unknown fields and use strict types, so a
string where a number belongs is a 422, not a silent conversion."""

from datetime import datetime
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import ConfigDict, Field, StrictInt, StrictStr


class Strict(Schema):
    model_config = ConfigDict(extra="forbid")


class Error(Schema):
    """Every 4xx body."""

    code: str = Field(description="stable machine-readable code, e.g. idempotency_key_reused")
    message: str
    errors: dict[str, str] = Field(description="field (dotted path) -> what is wrong")


class BudgetIn(Strict):
    """Limits for the run; an omitted limit means none."""

    model_calls: StrictInt | None = Field(None, ge=0, le=1_000_000)
    tool_calls: StrictInt | None = Field(None, ge=0, le=1_000_000)
    tokens: StrictInt | None = Field(None, ge=0, le=10**12, description="input + output tokens")
    cost_usd: Decimal | None = Field(
        None,
        ge=0,
        max_digits=12,
        decimal_places=6,
        description='USD, as a string like "0.10" or a number',
    )


class RunCreate(Strict):
    workflow: StrictStr = Field(min_length=1, max_length=100, examples=["room_temperature"])
    thread_id: StrictStr = Field(min_length=1, max_length=200, examples=["t1"])
    input: dict[str, Any] = Field(examples=[{"question": "How warm is the living room?"}])
    budget: BudgetIn | None = None


class Attempt(Schema):
    attempt: int
    worker: str | None
    outcome: str | None = Field(description="the last event type of this attempt")
    error_code: str | None


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


class RunOut(RunSummary):
    input: dict[str, Any]
    next_step: str | None
    current_step: str | None
    budget: Budget
    steps: list[StepOut]


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
    name: str
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
    operations_may_repeat: list[dict[str, Any]]
    steps_to_supersede: list[dict[str, Any]]
    input: dict[str, Any]


class CancelIn(Strict):
    reason: StrictStr = Field(min_length=1, max_length=2000)


class ResumeIn(Strict):
    checkpoint: StrictStr = Field(min_length=1, max_length=120)
    input_patch: dict[str, Any] | None = None
    reason: StrictStr = Field("", max_length=2000)


class ResolveIn(Strict):
    outcome: Literal["done", "not-done"]
    evidence: StrictStr = Field(min_length=1, max_length=4000)
    result: Any = None


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
    decision: Literal["approve", "reject"]
    comment: StrictStr = Field("", max_length=2000)
    #: An agent's tool call only: approve with these arguments instead (validated
    #: against the tool's schema: 422 ``invalid_arguments`` with field errors).
    arguments: dict[str, Any] | None = None
    #: An agent's tool call only: reject and let the model read this instead.
    message: StrictStr = Field("", max_length=4000)
