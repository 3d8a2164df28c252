"""Request and response shapes of the API (pydantic through django-ninja); they are
the OpenAPI schema. Request bodies forbid unknown fields and use strict types, so a
string where a number belongs is a 422, not a silent conversion. A field the engine
has a rule for (a reason, a budget, a decision, a rate, a schedule's timing) is
``checked``: taken as sent, whatever its JSON type, and handed to the engine's rule,
so a bad value gets the engine's code (``reason_required``, ``invalid_budget``...) as
on the CLI and the console; its type is only documented."""

from datetime import datetime
from typing import Any, ClassVar, Literal
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
    check_object,
)


def _document_required(schema: dict[str, Any], model: type) -> None:
    """Lists a body's ``ENGINE_REQUIRED`` fields as required in the OpenAPI document
    (the schema itself takes them missing: the engine refuses that with its code)."""
    names = getattr(model, "ENGINE_REQUIRED", ())
    if names:
        schema["required"] = list(dict.fromkeys([*schema.get("required", ()), *names]))


class Strict(Schema):
    """A request body: unknown fields refused, types strict. Lengths and characters of
    its text are not checked here: the engine's rules refuse them with the same code
    on every face (``runs.engine.rules``; 422 ``invalid_input``, ``invalid_thread``,
    ``reason_required``...). ``ENGINE_REQUIRED`` names the ``checked`` fields the
    engine requires (documented as required)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_document_required)
    ENGINE_REQUIRED: ClassVar[tuple[str, ...]] = ()


def checked(json_schema: dict[str, Any], default: Any = None, description: str = "") -> Any:
    """A body field (annotated ``Any``) whose value goes to the engine's rule as sent:
    any JSON value is taken (a missing one is ``default``), so that the engine answers
    a bad one with its code, also a value of the wrong JSON type (``"5"`` where a count
    is due is ``invalid_budget``, a missing reason ``reason_required``);
    ``json_schema`` is what the OpenAPI document says the field takes."""
    return Field(default, description=description, json_schema_extra=json_schema)


def sent_object(payload: Schema, field: str) -> Any:
    """``payload``'s ``field`` (an input or a patch, ``checked``) for the engine:
    ``None`` when it was left out; when it was sent, a JSON object or the engine's
    ``invalid_input`` (``check_object``), ``null`` included, which the engine would
    otherwise take for a field left out."""
    if field not in payload.model_fields_set:
        return None
    return check_object(getattr(payload, field), field)


#: Every reason field, described with its bounds in the OpenAPI document; not checked
#: here: the engine refuses a blank one as reason_required, a long one as invalid_input.
REASON = (
    f"why: 1..{MAX_REASON_CHARS} characters (422 reason_required when blank, "
    "invalid_input when longer)"
)
REASON_BOUNDS: dict[str, Any] = {"minLength": 1, "maxLength": MAX_REASON_CHARS}
#: Every reason field: checked by ``require_reason`` (missing or blank: 422
#: reason_required, not text or too long: invalid_input).
REASON_SCHEMA: dict[str, Any] = {"type": "string", **REASON_BOUNDS}


class Error(Schema):
    """Every 4xx body."""

    code: str = Field(description="stable machine-readable code, e.g. idempotency_key_reused")
    message: str
    errors: dict[str, str] = Field(description="field (dotted path) -> what is wrong")


def _count(key: str) -> str:
    """How the count ``key``'s bounds are described; the engine checks them."""
    return (
        f"whole JSON number, 0..{int(MAX_AMOUNTS[key])} (422 invalid_budget otherwise, "
        'also for text such as "5")'
    )


def _count_schema(key: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "maximum": int(MAX_AMOUNTS[key])}


#: How a USD amount's bounds are described; the engine checks them.
COST = (
    f'USD, as a string like "0.10" or a number, 0..{MAX_AMOUNTS["cost_usd"]} with at most '
    f"{COST_PLACES} decimal places (422 invalid_budget otherwise)"
)
COST_SCHEMA: dict[str, Any] = {"anyOf": [{"type": "string"}, {"type": "number", "minimum": 0}]}


class BudgetIn(Strict):
    """Limits for the run; an omitted (or null) limit means none. Only the OpenAPI
    document of ``RunCreate.budget``: the engine checks the object as sent
    (``runs.engine.effects.budget.limit_errors``: these keys only, bounds
    ``MAX_AMOUNTS``), so a bad one, an unknown key or a budget that is no object is 422
    ``invalid_budget`` as on every face."""

    model_calls: Any = checked(_count_schema("model_calls"), description=_count("model_calls"))
    tool_calls: Any = checked(_count_schema("tool_calls"), description=_count("tool_calls"))
    tokens: Any = checked(
        _count_schema("tokens"), description="input + output tokens; " + _count("tokens")
    )
    cost_usd: Any = checked(COST_SCHEMA, description=COST)


#: What an input field takes (a run's or a schedule's input, a resume's patch): checked
#: by the engine, which answers a value that is not a JSON object with invalid_input.
INPUT_OBJECT = "a JSON object (422 invalid_input otherwise, as on the CLI and the console)"


class RunCreate(Strict):
    ENGINE_REQUIRED = ("input",)
    workflow: StrictStr = Field(examples=["room_temperature"])
    thread_id: StrictStr = Field(
        examples=["t1"], description=f"1..{MAX_CHARS['thread_id']} characters, no controls"
    )
    input: Any = checked(
        {"type": "object", "examples": [{"question": "How warm is the living room?"}]},
        description=INPUT_OBJECT,
    )
    budget: Any = checked(
        {"anyOf": [BudgetIn.model_json_schema(), {"type": "null"}]},
        description="limits (422 invalid_budget for an unknown key, a bad amount, not an object)",
    )


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
    ENGINE_REQUIRED = ("reason",)
    reason: Any = checked(REASON_SCHEMA, description=REASON)


class ResumeIn(Strict):
    ENGINE_REQUIRED = ("reason",)
    checkpoint: StrictStr
    input_patch: Any = checked(
        {"anyOf": [{"type": "object"}, {"type": "null"}]}, description=INPUT_OBJECT
    )
    reason: Any = checked(REASON_SCHEMA, description=REASON)
    reexecute: StrictBool = Field(
        False,
        description="make the side effects recorded after the checkpoint again instead of "
        "reusing their results",
    )


class ReplayIn(Strict):
    ENGINE_REQUIRED = ("reason",)
    checkpoint: StrictStr | None = Field(
        None, description="default: the last checkpoint before the failed (or cancelled) step"
    )
    reason: Any = checked(REASON_SCHEMA, description=REASON)
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

    ENGINE_REQUIRED = ("reason",)
    status: Literal["FAILED", "CANCELLED", "SUCCEEDED"] = "FAILED"
    workflow: StrictStr | None = None
    error_code: StrictStr | None = None
    since: datetime | None = Field(None, description="created at or after (ISO time)")
    rate: Any = checked(
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
        5.0,
        description="replays started per second, a JSON number in (0, 1000] (422 "
        "invalid_rate otherwise)",
    )
    again: StrictBool = Field(False, description="also runs replayed before")
    reexecute: StrictBool = False
    dry_run: StrictBool = False
    limit: StrictInt = Field(500, ge=1, le=1000)
    reason: Any = checked(REASON_SCHEMA, description=REASON)


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
    ENGINE_REQUIRED = ("reason",)
    reason: Any = checked(REASON_SCHEMA, description=REASON)
    #: Retry an unknown outcome although the latest verify answer says it happened.
    against_verify: StrictBool = False


class BudgetRaiseIn(Strict):
    """Amounts to add; at least one must be positive. Taken as sent and checked by the
    engine as ``BudgetIn``'s (422 ``invalid_budget``)."""

    ENGINE_REQUIRED = ("reason",)
    reason: Any = checked(REASON_SCHEMA, description=REASON)
    add_model_calls: Any = checked(_count_schema("model_calls"), 0, _count("model_calls"))
    add_tool_calls: Any = checked(_count_schema("tool_calls"), 0, _count("tool_calls"))
    add_tokens: Any = checked(_count_schema("tokens"), 0, _count("tokens"))
    add_cost_usd: Any = checked(COST_SCHEMA, "0", COST)


class ResolveIn(Strict):
    ENGINE_REQUIRED = ("outcome", "evidence")
    outcome: Any = checked(
        {"type": "string", "enum": ["done", "not-done"]},
        description="done or not-done (422 invalid_outcome otherwise)",
    )
    evidence: Any = checked(
        {"type": "string", "minLength": 1, "maxLength": MAX_EVIDENCE_CHARS},
        description=f"what you checked: 1..{MAX_EVIDENCE_CHARS} characters (422 "
        "evidence_required when missing or blank, invalid_input when longer or not text)",
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
    ENGINE_REQUIRED = ("decision",)
    decision: Any = checked(
        {"type": "string", "enum": ["approve", "reject"]},
        description="approve or reject (anything else, also a missing decision, null or "
        "a number: 422 invalid_decision, as on every face)",
    )
    comment: Any = checked(
        {"type": "string", "maxLength": MAX_COMMENT_CHARS},
        "",
        f"at most {MAX_COMMENT_CHARS} characters (422 invalid_input otherwise)",
    )
    #: An agent's tool call only: approve with these arguments instead (validated
    #: against the tool's schema: 422 ``invalid_arguments`` with field errors).
    arguments: dict[str, Any] | None = None
    #: An agent's tool call only: reject and let the model read this instead.
    message: Any = checked(
        {"type": "string", "maxLength": MAX_MESSAGE_CHARS},
        "",
        f"at most {MAX_MESSAGE_CHARS} characters (422 invalid_input otherwise)",
    )
