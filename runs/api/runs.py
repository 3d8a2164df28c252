"""Run endpoints: create (idempotent), read, list, events, messages, checkpoints, and
the actions (cancel, resume from a checkpoint, retry, raise the budget, resolve an
unknown outcome), each conditional on the run's ETag (``runs.api.conditional``)."""

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.conf import settings
from django.http import HttpResponse
from ninja import Header, Query, Router, Schema, Status
from pydantic import Field, field_validator

from apitokens.services import throttle
from runs.api import access
from runs.api.conditional import check_idempotency_key, conditional_action, response_body
from runs.api.documents import (
    etag_header,
    event_document,
    message_document,
    run_document,
    run_summary,
    step_documents,
)
from runs.api.errors import ApiError, error_responses, not_found
from runs.api.schemas import (
    AttemptLogOut,
    BudgetRaiseIn,
    CancelIn,
    CheckpointOut,
    EventPage,
    MessageOut,
    ResolveIn,
    ResumeIn,
    ResumePreview,
    RetryIn,
    RunCreate,
    RunOut,
    RunPage,
    StepPage,
    sent_object,
)
from runs.console.filters import RunFilter
from runs.engine.service import (
    check_identifier,
    check_replay,
    db_now,
    find_request,
    list_checkpoints,
    plan_resume,
    raise_budget,
    request_cancel,
    request_fingerprint,
    resolve_unknown,
    resume_from_checkpoint,
    retry_step,
    start_run,
    start_run_once,
)
from runs.models import AttemptLog, Event, Message, Run, Step, Thread
from runs.states import RunStatus

router = Router(tags=["runs"])

ERRORS = error_responses(429)


@router.post(
    "/runs",
    response={200: RunOut, 201: RunOut, **ERRORS},
    summary="Start a run (idempotent with Idempotency-Key)",
    openapi_extra=etag_header(200, 201),
)
def create_run(
    request,
    response: HttpResponse,
    payload: RunCreate,
    idempotency_key: str | None = Header(None, alias="Idempotency-Key"),
):
    """Start ``workflow`` on the caller's thread ``thread_id`` with ``input``.

    With an ``Idempotency-Key`` header a retry with the same key and body gets the first
    response again, byte for byte (the run as created; 201 the first time, 200 after,
    header ``Idempotent-Replayed: true``), also for concurrent requests; the same key
    with another body is a 422 ``idempotency_key_reused``. Run creations are throttled
    per token (429).
    """
    user = request.user
    # The canonical body the fingerprint covers; omitted budget limits are dropped, the
    # input is kept exactly as sent (nulls included).
    body: dict[str, Any] = {
        "workflow": payload.workflow,
        "thread_id": payload.thread_id,
        "input": payload.input,
    }
    if payload.budget is not None:
        # As sent, for the engine to check (a NaN stays a NaN, a list stays a list; a
        # null limit is no limit, as on every face).
        body["budget"] = payload.budget
    check_idempotency_key(idempotency_key)
    fingerprint = request_fingerprint(body)
    if idempotency_key:
        existing = find_request(user, idempotency_key)
        if existing is not None:
            # A retry: no throttling, nothing new.
            check_replay(existing, fingerprint)
            response["Idempotent-Replayed"] = "true"
            document = _first_response(existing)
            response["ETag"] = document["etag"]
            return Status(200, document)
    decision = throttle(
        request.api_token,
        limit=settings.AGENTOPS_API_CREATE_LIMIT,
        period=settings.AGENTOPS_API_CREATE_PERIOD,
    )
    if not decision.allowed:
        raise ApiError(
            429,
            "throttled",
            "too many runs created with this token; retry later",
            headers={"Retry-After": str(decision.retry_after)},
        )
    kwargs: dict[str, Any] = {
        "thread_id": body["thread_id"],
        "input": body["input"],
        "owner": user,
        "budget": body.get("budget"),
        "actor": access.actor(user),
    }
    if idempotency_key:
        run, created = start_run_once(
            body["workflow"],
            request_id=idempotency_key,
            request_fingerprint=fingerprint,
            respond=lambda new: response_body(run_document(new)),
            **kwargs,
        )
        document = _first_response(run)
    else:
        run, created = start_run(body["workflow"], **kwargs), True
        document = run_document(run)
    if not created:
        response["Idempotent-Replayed"] = "true"
    response["Location"] = f"/api/v1/runs/{run.pk}"
    response["ETag"] = document["etag"]
    return Status(201 if created else 200, document)


def _first_response(run: Run):
    """The body that answered the request that created ``run`` with a key, which every
    retry with that key gets again; a run from before bodies were kept answers as it is
    now."""
    return run.request_response if run.request_response is not None else run_document(run)


class RunFilters(Schema):
    """The console's run filters (``runs.console.filters.RunFilter``) as query
    parameters; times are ISO datetimes."""

    status: RunStatus | None = None
    workflow: str | None = None
    version: int | None = Field(None, ge=1, le=2**31 - 1)
    thread_id: str | None = None
    q: str | None = Field(None, max_length=200, description="run id prefix, thread id or goal text")
    stuck: bool | None = None
    has_unknown: bool | None = Field(None, description="has a step whose outcome is unknown")
    is_replay: bool | None = Field(None, description="replays another run")
    was_replayed: bool | None = Field(None, description="has been replayed")
    parent: str | None = Field(
        None,
        max_length=36,
        # At least four hex digits, as every run id prefix (run_ids.MIN_HEX_DIGITS).
        pattern=r"^(?:-*[0-9a-fA-F]){4}[0-9a-fA-F-]*$",
        description="child runs of this run (its id or a prefix of at least 4 hex digits)",
    )
    created_after: datetime | None = None
    created_before: datetime | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    limit: int = Field(50, ge=1, le=200)
    offset: int = Field(0, ge=0, le=1_000_000)

    @field_validator("created_after", "created_before", "updated_after", "updated_before")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        """In UTC (naive means UTC): PostgreSQL refuses offsets beyond +-15:59."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError("out of range") from None


@router.get("/runs", response={200: RunPage, **ERRORS}, summary="List runs, newest first")
def list_runs(request, filters: Query[RunFilters]):
    # A filter is held to the rule of what it names, with its code (invalid_thread...).
    for kind, value in (("workflow", filters.workflow), ("thread_id", filters.thread_id)):
        if value is not None:
            check_identifier(value, kind)
    runs = access.visible_runs(request.user).order_by("-created_at", "-pk")
    exact = {
        "status": filters.status,
        "workflow": filters.workflow,
        "workflow_version": filters.version,
        "thread__thread_id": filters.thread_id,
        "created_at__gte": filters.created_after,
        "created_at__lt": filters.created_before,
        "updated_at__gte": filters.updated_after,
        "updated_at__lt": filters.updated_before,
    }
    runs = runs.filter(**{k: v for k, v in exact.items() if v is not None})
    # Text, "stuck" and "has unknown outcome" mean exactly what they mean on the console.
    console = {
        "q": filters.q,
        "stuck": filters.stuck,
        "has_unknown": filters.has_unknown,
        "is_replay": filters.is_replay,
        "was_replayed": filters.was_replayed,
        "parent": filters.parent,
    }
    data = {
        k: str(v).lower() if isinstance(v, bool) else v for k, v in console.items() if v is not None
    }
    if data:
        runs = RunFilter(data, queryset=runs, now=db_now()).qs
    page = runs[filters.offset : filters.offset + filters.limit]
    return {
        "items": [run_summary(r) for r in page],
        "count": runs.count(),
        "limit": filters.limit,
        "offset": filters.offset,
    }


@router.get(
    "/runs/{run:run_id}",
    response={200: RunOut, **ERRORS},
    summary="Read a run",
    openapi_extra=etag_header(200),
)
def read_run(request, response: HttpResponse, run_id: UUID):
    """The run, with its ``ETag`` (also in the body as ``etag``): send it as ``If-Match``
    with an action on the run."""
    document = run_document(access.get_run(request.user, run_id))
    response["ETag"] = document["etag"]
    return document


@router.get(
    "/runs/{run:run_id}/events",
    response={200: EventPage, **ERRORS},
    summary="The run's events after a sequence number",
)
def list_events(
    request,
    run_id: UUID,
    after: int = Query(0, ge=0, le=2**31 - 1),
    limit: int = Query(100, ge=1, le=1000),
):
    run = access.get_run(request.user, run_id)
    events = list(Event.objects.filter(run=run, seq__gt=after).order_by("seq")[:limit])
    names = dict(Step.objects.filter(run=run).values_list("pk", "name"))
    return {
        "items": [event_document(e, names) for e in events],
        "run_status": run.status,
        "last_seq": run.event_seq,
    }


@router.get(
    "/threads/{path:thread_id}/messages",
    response={200: list[MessageOut], **ERRORS},
    summary="A thread's messages in order",
)
def list_messages(
    request,
    thread_id: str,
    include_superseded: bool = False,
    after_seq: int = Query(0, ge=0, le=2**31 - 1),
    limit: int = Query(200, ge=1, le=1000),
):
    """Final and draft messages in ``seq`` order (drafts are being streamed); superseded
    drafts only with ``include_superseded=true``."""
    thread = Thread.objects.filter(owner=request.user, thread_id=thread_id).first()
    if thread is None:
        raise not_found("thread")
    messages = Message.objects.filter(thread=thread, seq__gt=after_seq).order_by("seq")
    if not include_superseded:
        messages = messages.exclude(status=Message.Status.SUPERSEDED)
    return [message_document(m) for m in messages[:limit]]


@router.post(
    "/runs/{run:run_id}/cancel",
    response={200: RunOut, **ERRORS},
    summary="Cancel a run",
    openapi_extra=etag_header(200),
)
@conditional_action()
def cancel_run(request, run_id: UUID, payload: CancelIn):
    """Ask the run to cancel (CANCEL_REQUESTED, then CANCELLED once the running step
    reaches a safe point). 409 ``run_terminal`` for a finished run."""
    run = access.get_run_to_operate(request.user, run_id)
    request_cancel(run, actor=access.actor(request.user), reason=payload.reason)
    return run_document(run)


@router.get(
    "/runs/{run:run_id}/checkpoints",
    response={200: list[CheckpointOut], **ERRORS},
    summary="The run's checkpoints, oldest first, a page at a time",
)
def checkpoints(
    request,
    run_id: UUID,
    response: HttpResponse,
    after: int = Query(0, ge=0, le=2**63 - 1),
    limit: int = Query(100, ge=1, le=1000),
):
    """``resumable`` ones can be named in ``POST /runs/{id}/resume``. Pages by cursor:
    pass the last ``id`` as ``after``; a full page carries a ``Link: <...>; rel="next"``
    header."""
    rows = list_checkpoints(access.get_run(request.user, run_id), after=after, limit=limit)
    if len(rows) == limit:
        query = urlencode({"after": rows[-1]["id"], "limit": limit})
        response["Link"] = f'<{request.path}?{query}>; rel="next"'
    return rows


@router.get(
    "/runs/{run:run_id}/steps",
    response={200: StepPage, **ERRORS},
    summary="The run's steps with their attempts, in seq order, a page at a time",
)
def list_steps(
    request,
    run_id: UUID,
    after_seq: int = Query(0, ge=0, le=2**31 - 1),
    limit: int = Query(100, ge=1, le=1000),
):
    """Steps with ``seq`` above ``after_seq``; ``next_after_seq`` continues."""
    run = access.get_run(request.user, run_id)
    steps = list(Step.objects.filter(run=run, seq__gt=after_seq).order_by("seq")[:limit])
    return {
        "items": step_documents(run, steps),
        "next_after_seq": steps[-1].seq if len(steps) == limit else None,
    }


@router.get(
    "/runs/{run:run_id}/steps/{step:step_id}/attempts/{attempt:attempt}/log",
    response={200: AttemptLogOut, **ERRORS},
    summary="What one attempt of a step logged and printed (its newest bytes)",
)
def attempt_log(request, run_id: UUID, step_id: int, attempt: int):
    """The stored log of ``attempt`` of the step with id ``step_id`` (the ``id`` of the
    run's step documents); 404 ``not_found`` when the run has no such step or the
    attempt no stored log (still running, or its worker died)."""
    run = access.get_run(request.user, run_id)
    log = AttemptLog.objects.filter(run=run, step_id=step_id, attempt=attempt).first()
    if log is None:
        raise not_found("attempt log")
    return {
        "step_id": log.step_id,
        "attempt": log.attempt,
        "text": log.text,
        "truncated": log.truncated,
        "total_bytes": log.total_bytes,
        "created_at": log.created_at,
    }


@router.get(
    "/runs/{run:run_id}/resume-preview",
    response={200: ResumePreview, **ERRORS},
    summary="What resuming from a checkpoint would re-run",
)
def resume_preview(
    request,
    run_id: UUID,
    checkpoint: str = Query(...),
    reexecute: bool = False,
):
    """The steps that would run again, each side effect whose recorded result the resume
    reuses (with that result) and those that could repeat (all of them with
    ``reexecute``); changes nothing."""
    run = access.get_run(request.user, run_id)
    return plan_resume(run, checkpoint, reexecute=reexecute).as_dict()


@router.post(
    "/runs/{run:run_id}/resume",
    response={200: RunOut, **ERRORS},
    summary="Resume the run from a named checkpoint",
    openapi_extra=etag_header(200),
)
@conditional_action()
def resume_run(request, run_id: UUID, payload: ResumeIn):
    run = access.get_run_to_operate(request.user, run_id)
    resume_from_checkpoint(
        run,
        payload.checkpoint,
        actor=access.actor(request.user),
        input_patch=sent_object(payload, "input_patch"),
        reason=payload.reason,
        reexecute=payload.reexecute,
    )
    return run_document(run)


@router.post(
    "/runs/{run:run_id}/steps/{step_name}/resolve",
    response={200: RunOut, **ERRORS},
    openapi_extra=etag_header(200),
    summary="Resolve a step whose outcome is unknown",
)
@conditional_action()
def resolve_step(request, run_id: UUID, step_name: str, payload: ResolveIn):
    """``done`` (with evidence and optional result: the side effect happened) or
    ``not-done`` (it did not: the step runs again)."""
    run = access.get_run_to_operate(request.user, run_id)
    resolve_unknown(
        run,
        step_name,
        outcome=payload.outcome,
        evidence=payload.evidence,
        actor=access.actor(request.user),
        result=payload.result,
        against_verify=payload.against_verify,
    )
    return run_document(run)


@router.post(
    "/runs/{run:run_id}/retry",
    response={200: RunOut, **ERRORS},
    summary="Retry the failed or unknown step of a paused run",
    openapi_extra=etag_header(200),
)
@conditional_action()
def retry_run(request, run_id: UUID, payload: RetryIn):
    """A new attempt row of the PAUSED run's failed step (an UNKNOWN step counts as "not
    done"); the run goes RUNNING. 409 ``not_allowed_in_state`` or ``nothing_to_retry``."""
    run = access.get_run_to_operate(request.user, run_id)
    retry_step(
        run,
        actor=access.actor(request.user),
        reason=payload.reason,
        against_verify=payload.against_verify,
    )
    return run_document(run)


@router.post(
    "/runs/{run:run_id}/budget",
    response={200: RunOut, **ERRORS},
    summary="Raise the run's budget limits",
    openapi_extra=etag_header(200),
)
@conditional_action()
def raise_run_budget(request, run_id: UUID, payload: BudgetRaiseIn):
    """Add to the run's limits (a limit the run does not have stays unlimited); a run
    paused because its budget ran out resumes. 422 ``invalid_budget`` for no positive
    amount."""
    run = access.get_run_to_operate(request.user, run_id)
    raise_budget(
        run,
        actor=access.actor(request.user),
        reason=payload.reason,
        add_model_calls=payload.add_model_calls,
        add_tool_calls=payload.add_tool_calls,
        add_tokens=payload.add_tokens,
        add_cost_usd=payload.add_cost_usd,
    )
    return run_document(run)
