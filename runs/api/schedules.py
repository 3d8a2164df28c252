"""Schedule endpoints: list, create, pause, resume, trigger now, delete. Schedules belong
to the deployment, not to one owner: reading needs a staff token with ``runs.view_run``,
changing one ``runs.operate_run`` (403 ``permission_denied`` otherwise)."""

from typing import Any

from ninja import Router, Schema, Status

from runs.api.conditional import conditional_action
from runs.api.errors import ApiError, error_responses
from runs.api.schemas import INPUT_OBJECT, Strict, checked, sent_object
from runs.engine import service as engine
from runs.engine.service import (
    delete_schedule,
    describe_schedule,
    set_schedule_paused,
    trigger_schedule,
)
from runs.models import Schedule, ScheduleTick

router = Router(tags=["schedules"])
ERRORS = error_responses()


class TickOut(Schema):
    tick_at: str
    outcome: str
    run: str | None
    manual: bool


class ScheduleOut(Schema):
    """A schedule: its timing (``"every 2s"``, ``"0 9 * * 1 (Europe/Paris)"``), policies,
    the next three tick times (empty while paused) and its last ticks, newest first."""

    name: str
    workflow: str
    timing: str
    input: dict[str, Any]
    overlap: str
    catchup: str
    paused: bool
    next_fire_times: list[str]
    last_ticks: list[TickOut]


class ScheduleIn(Strict):
    """Exactly one of ``cron`` (with ``timezone``, default UTC) and ``every`` (whole
    seconds, 1 to 315,360,000: ten years; a JSON number, not text). The engine checks
    every field (``create_schedule``): a bad timing, policy or window is 422
    ``invalid_input`` with the engine's message, as from the CLI."""

    name: str
    workflow: str
    cron: str | None = None
    timezone: str | None = None
    every: Any = checked({"type": "integer", "minimum": 1}, description="whole seconds")
    input: Any = checked({"type": "object"}, description="default {}; " + INPUT_OBJECT)
    overlap: Any = checked({"type": "string", "enum": ["skip", "allow"]}, "skip")
    catchup: Any = checked({"type": "string", "enum": ["none", "latest", "all"]}, "latest")
    catchup_window: Any = checked(
        {"type": "integer", "minimum": 1}, 3600, "whole seconds a missed tick is caught up"
    )


class TickResult(Schema):
    """What ``trigger`` did: the tick (``started`` with its run, or ``skipped``)."""

    outcome: str
    run: str | None
    detail: str


def _require(user, permission: str) -> None:
    if not (user.is_staff and user.has_perm(permission)):
        raise ApiError(403, "permission_denied", f"schedules need a staff token with {permission}")


def _no_run(kwargs: dict[str, Any]) -> None:
    return None


@router.get("/schedules", response={200: list[ScheduleOut], **ERRORS}, summary="List schedules")
def list_schedules(request):
    _require(request.user, "runs.view_run")
    return [describe_schedule(s) for s in Schedule.objects.order_by("name")]


@router.post("/schedules", response={201: ScheduleOut, **ERRORS}, summary="Create a schedule")
def create_schedule(request, payload: ScheduleIn):
    """422 ``invalid_input`` (timing, zone, input), ``unknown_workflow``; 409
    ``schedule_exists``."""
    _require(request.user, "runs.operate_run")
    schedule = engine.create_schedule(
        payload.name,
        payload.workflow,
        cron=payload.cron,
        timezone=payload.timezone,
        every=payload.every,
        input=sent_object(payload, "input"),
        overlap=payload.overlap,
        catchup=payload.catchup,
        catchup_window=payload.catchup_window,
    )
    return Status(201, describe_schedule(schedule))


@router.post(
    "/schedules/{name}/pause", response={200: ScheduleOut, **ERRORS}, summary="Pause a schedule"
)
def pause(request, name: str):
    """Stop ticking (idempotent). 404 ``unknown_schedule``."""
    _require(request.user, "runs.operate_run")
    return describe_schedule(set_schedule_paused(name, True))


@router.post(
    "/schedules/{name}/resume",
    response={200: ScheduleOut, **ERRORS},
    summary="Resume a schedule",
)
def resume(request, name: str):
    """Tick again from now: the paused time is not caught up (idempotent). 404
    ``unknown_schedule``."""
    _require(request.user, "runs.operate_run")
    return describe_schedule(set_schedule_paused(name, False))


@router.post(
    "/schedules/{name}/trigger",
    response={200: TickResult, **ERRORS},
    summary="Tick a schedule now",
)
@conditional_action(_no_run, precondition=False)
def trigger(request, name: str):
    """A tick now, outside the timetable; the overlap policy applies (``skipped`` while
    the previous run is open)."""
    _require(request.user, "runs.operate_run")
    tick: ScheduleTick = trigger_schedule(name, f"user:{request.user.get_username()}")
    return {"outcome": tick.outcome, "run": str(tick.run_id) if tick.run_id else None,
            "detail": tick.detail}  # fmt: skip


@router.delete("/schedules/{name}", response={204: None, **ERRORS}, summary="Delete a schedule")
def delete(request, name: str):
    """Its runs stay. 404 ``unknown_schedule``."""
    _require(request.user, "runs.operate_run")
    delete_schedule(name)
    return Status(204, None)
