"""Schedules: runs of a workflow started on a cron expression (in a time zone) or every
N seconds.

Each tick has a unique key in the database (``ScheduleTick(schedule, tick_at)``) and is
handled under the schedule's row lock, so any number of sweepers and workers start it
once. ``fire_due_schedules`` is the sweeper task: it walks the ticks from
``next_fire_at`` up to now, starts a run for each tick the catch-up policy keeps (the
others are recorded ``missed``) unless the overlap policy skips it, and moves
``next_fire_at`` past them. Interval ticks sit on multiples of the interval since the
Unix epoch, so they do not drift with the time a sweep happens to run.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.db.models.functions import Now

from runs.engine.control.lifecycle import start_run
from runs.engine.durations import duration_problem
from runs.engine.errors import ControlError
from runs.engine.rules import check_identifier, value_problem
from runs.engine.state.clock import db_now
from runs.models import Schedule, ScheduleTick
from runs.states import RUN_TERMINAL
from runs.workflows import registry

logger = logging.getLogger("agentops.schedules")

#: The most ticks one sweep walks for one schedule (a schedule every second left for a
#: day has 86,400 missed ticks; the rest are walked by the next sweeps).
MAX_TICKS_PER_SWEEP = 1000


@dataclass(frozen=True)
class Timing:
    """When a schedule ticks: ``cron`` in ``timezone``, or ``every_seconds``."""

    cron: str = ""
    timezone: str = "UTC"
    every_seconds: int | None = None

    def next_after(self, instant: datetime) -> datetime:
        """The first tick strictly after ``instant`` (aware), as aware UTC."""
        if self.every_seconds:
            epoch = int(instant.timestamp()) // self.every_seconds * self.every_seconds
            return datetime.fromtimestamp(epoch + self.every_seconds, UTC)
        local = instant.astimezone(ZoneInfo(self.timezone))
        return croniter(self.cron, local).get_next(datetime).astimezone(UTC)

    def describe(self) -> str:
        """``"every 2s"`` or ``"0 9 * * 1 (Europe/Paris)"``."""
        if self.every_seconds:
            return f"every {self.every_seconds}s"
        return f"{self.cron} ({self.timezone})"


def timing_of(schedule: Schedule) -> Timing:
    return Timing(schedule.cron, schedule.timezone, schedule.every_seconds)


def check_timing(cron: str | None, timezone: str | None, every: int | None) -> Timing:
    """The ``Timing`` of exactly one of ``cron`` (with ``timezone``, default UTC; a
    blank zone is refused, not taken as UTC) and ``every`` (a whole number of seconds
    from 1 to ``durations.MAX_SECONDS``; text such as ``"60"`` is refused). Raises
    ``ControlError("invalid_input")`` naming the field."""
    if (cron is None) == (every is None):
        raise ControlError(
            "invalid_input", "give exactly one of cron and every", {"cron": "cron or every"}
        )
    if timezone is not None and (not isinstance(timezone, str) or not timezone.strip()):
        raise ControlError(
            "invalid_input", "time zone must be non-blank text", {"timezone": "blank"}
        )
    if every is not None:
        reason = duration_problem(every, low=1, whole=True)
        if reason is not None:
            raise ControlError("invalid_input", f"every {reason}", {"every": reason})
        if timezone not in (None, "UTC"):
            raise ControlError(
                "invalid_input", "a time zone applies to cron only", {"timezone": "cron only"}
            )
        return Timing(every_seconds=every)
    zone = timezone or "UTC"
    try:
        ZoneInfo(zone)
    # OSError: a name too long for a file name (the zone database is files).
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ControlError(
            "invalid_input", f"unknown time zone {zone!r}", {"timezone": "unknown"}
        ) from None
    if not isinstance(cron, str) or not croniter.is_valid(cron.strip()):
        raise ControlError("invalid_input", f"not a cron expression: {cron!r}", {"cron": "invalid"})
    try:
        Timing(cron.strip(), zone).next_after(datetime.now(UTC))
    except CroniterError as exc:
        raise ControlError("invalid_input", f"cron {cron!r}: {exc}", {"cron": "invalid"}) from None
    return Timing(cron.strip(), zone)


def create_schedule(
    name: str,
    workflow: str,
    *,
    cron: str | None = None,
    timezone: str | None = None,
    every: int | None = None,
    input: Any = None,
    overlap: str = Schedule.Overlap.SKIP,
    catchup: str = Schedule.Catchup.LATEST,
    catchup_window: int = 3600,
) -> Schedule:
    """Create the schedule ``name`` starting runs of ``workflow`` (its latest version at
    each tick) with ``input`` (default ``{}``); the first tick is the first after now.
    Raises ``ControlError``: ``invalid_input`` (name, timing, input, policies),
    ``unknown_workflow``, ``schedule_exists``."""
    check_identifier(name, "schedule", "name")
    check_identifier(workflow, "workflow")
    timing = check_timing(cron, timezone, every)
    input = {} if input is None else input
    try:
        wf = registry.get(workflow)
    except registry.UnknownWorkflow as exc:
        raise ControlError("unknown_workflow", str(exc), {"workflow": "unknown"}) from exc
    # A value no database stores is named before the schema could misname it.
    if (found := value_problem(input)) is not None:
        path, type_name, reason = found
        errors = {path[2:] if path.startswith("$.") else path[1:] or "input": reason}
    else:
        errors = wf.validate_input(input)
    if errors:
        raise ControlError(
            "invalid_input",
            "input is not valid for " + wf.name,
            {f"input.{k}" if k != "input" else k: v for k, v in errors.items()},
        )
    if overlap not in Schedule.Overlap.values:
        raise ControlError("invalid_input", "overlap must be skip or allow", {"overlap": "invalid"})
    if catchup not in Schedule.Catchup.values:
        raise ControlError(
            "invalid_input", "catchup must be none, latest or all", {"catchup": "invalid"}
        )
    window_problem = duration_problem(catchup_window, low=1, whole=True)
    if window_problem is not None:
        raise ControlError(
            "invalid_input",
            f"catchup window {window_problem}",
            {"catchup_window": window_problem},
        )
    try:
        with transaction.atomic():
            return Schedule.objects.create(
                name=name,
                workflow=wf.name,
                input=input,
                cron=timing.cron,
                timezone=timing.timezone,
                every_seconds=timing.every_seconds,
                overlap=overlap,
                catchup=catchup,
                catchup_window=catchup_window,
                next_fire_at=timing.next_after(db_now()),
            )
    except IntegrityError:
        raise ControlError(
            "schedule_exists", f"a schedule named {name!r} exists", {"name": "exists"}
        ) from None


def get_schedule(name: str) -> Schedule:
    """The schedule ``name``; raises ``ControlError("unknown_schedule")``, or
    ``invalid_input`` for a name that breaks the name rule."""
    check_identifier(name, "schedule", "name")
    schedule = Schedule.objects.filter(name=name).first()
    if schedule is None:
        known = ", ".join(Schedule.objects.values_list("name", flat=True)[:20]) or "none"
        raise ControlError("unknown_schedule", f"no schedule {name!r} (schedules: {known})")
    return schedule


def set_paused(name: str, paused: bool) -> Schedule:
    """Pause or resume the schedule ``name``. A resumed schedule's next tick is the first
    after now: ticks while it was paused are not caught up. Idempotent."""
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().get(pk=get_schedule(name).pk)
        if schedule.paused != paused:
            schedule.paused = paused
            if not paused:
                schedule.next_fire_at = timing_of(schedule).next_after(db_now())
            schedule.save(update_fields=["paused", "next_fire_at"])
    return schedule


def delete_schedule(name: str) -> None:
    """Delete the schedule ``name`` and its ticks (its runs stay)."""
    get_schedule(name).delete()


def trigger_now(name: str, actor: str) -> ScheduleTick:
    """A tick of the schedule ``name`` now (database clock), outside its timetable and
    whether or not it is paused; the overlap policy applies. Returns the tick."""
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().get(pk=get_schedule(name).pk)
        tick = _tick(schedule, db_now(), actor, manual=True)
    if tick is None:  # pragma: no cover - two triggers in one microsecond
        raise ControlError("tick_exists", "a tick at this instant exists; trigger again")
    return tick


def fire_due_schedules(actor: str, batch: int) -> int:
    """Sweeper task: handle every due tick of up to ``batch`` schedules; returns how many
    runs started. A tick later than ``AGENTOPS_SCHEDULE_GRACE_SECONDS`` is missed and
    follows the schedule's catch-up policy: ``none`` starts none of the missed ticks,
    ``latest`` the latest of them (when no tick is on time), ``all`` every one within
    ``catchup_window`` seconds."""
    due = list(
        Schedule.objects.filter(paused=False, next_fire_at__lte=Now())
        .order_by("next_fire_at")
        .values_list("pk", flat=True)[:batch]
    )
    started = 0
    for pk in due:
        with transaction.atomic():
            schedule = (
                Schedule.objects.select_for_update(skip_locked=True)
                .filter(pk=pk, paused=False, next_fire_at__lte=Now())
                .first()
            )
            if schedule is None:
                continue
            started += _fire(schedule, actor)
    return started


def next_fire_at() -> datetime | None:
    """The earliest ``next_fire_at`` of an active schedule (the sweeper wakes then)."""
    return (
        Schedule.objects.filter(paused=False, next_fire_at__isnull=False)
        .order_by("next_fire_at")
        .values_list("next_fire_at", flat=True)
        .first()
    )


def next_fire_times(schedule: Schedule, count: int = 3) -> list[datetime]:
    """The next ``count`` tick times of ``schedule`` from its ``next_fire_at`` (empty
    when paused)."""
    if schedule.paused or schedule.next_fire_at is None:
        return []
    timing, times = timing_of(schedule), [schedule.next_fire_at]
    while len(times) < count:
        times.append(timing.next_after(times[-1]))
    return times


def missed_ticks(since: timedelta | None = None) -> dict[str, int]:
    """``{schedule name: missed ticks}`` of schedules with missed ticks (recorded in the
    last ``since`` when given)."""
    query = ScheduleTick.objects.filter(outcome=ScheduleTick.Outcome.MISSED)
    if since is not None:
        query = query.filter(created_at__gte=Now() - since)
    counts: dict[str, int] = {}
    for name in query.values_list("schedule__name", flat=True):
        counts[name] = counts.get(name, 0) + 1
    return counts


def describe(schedule: Schedule, last: int = 3) -> dict:
    """``{name, workflow, timing, input, overlap, catchup, paused, next_fire_times,
    last_ticks: [{tick_at, outcome, run, manual}]}`` of ``schedule`` (its ``last``
    ticks, newest first) for listings: the CLI's and the API's."""
    ticks = ScheduleTick.objects.filter(schedule=schedule).order_by("-tick_at")[:last]
    return {
        "name": schedule.name,
        "workflow": schedule.workflow,
        "timing": timing_of(schedule).describe(),
        "input": schedule.input,
        "overlap": schedule.overlap,
        "catchup": schedule.catchup,
        "paused": schedule.paused,
        "next_fire_times": [t.isoformat() for t in next_fire_times(schedule)],
        "last_ticks": [
            {
                "tick_at": t.tick_at.isoformat(),
                "outcome": t.outcome,
                "run": str(t.run_id) if t.run_id else None,
                "manual": t.manual,
            }
            for t in ticks
        ],
    }


def _fire(schedule: Schedule, actor: str) -> int:
    """Walk the due ticks of the locked ``schedule``; returns how many runs started."""
    now = db_now()
    timing = timing_of(schedule)
    ticks: list[datetime] = []
    tick = schedule.next_fire_at
    while tick is not None and tick <= now and len(ticks) < MAX_TICKS_PER_SWEEP:
        ticks.append(tick)
        tick = timing.next_after(tick)
    schedule.next_fire_at = tick
    schedule.save(update_fields=["next_fire_at"])
    grace = timedelta(seconds=settings.AGENTOPS_SCHEDULE_GRACE_SECONDS)
    on_time = [t for t in ticks if now - t <= grace]
    late = [t for t in ticks if now - t > grace]
    kept: list[datetime] = []
    if schedule.catchup == Schedule.Catchup.ALL:
        window = timedelta(seconds=schedule.catchup_window)
        kept = [t for t in late if now - t <= window]
    elif schedule.catchup == Schedule.Catchup.LATEST and late and not on_time:
        kept = late[-1:]
    started = 0
    for t in late:
        if t not in kept:
            _record(schedule, t, ScheduleTick.Outcome.MISSED, detail="left out by catch-up")
    for t in [*kept, *on_time]:
        done = _tick(schedule, t, actor)
        started += done is not None and done.outcome == ScheduleTick.Outcome.STARTED
    return started


def _tick(
    schedule: Schedule, tick_at: datetime, actor: str, *, manual: bool = False
) -> ScheduleTick | None:
    """Handle one tick under the schedule's lock: insert its row (``None`` when another
    process had it), then start its run unless the overlap policy skips it."""
    if schedule.overlap == Schedule.Overlap.SKIP:
        previous = (
            ScheduleTick.objects.filter(schedule=schedule, run__isnull=False)
            .filter(~Q(run__status__in=RUN_TERMINAL))
            .values_list("run_id", flat=True)
            .first()
        )
        if previous is not None:
            return _record(
                schedule,
                tick_at,
                ScheduleTick.Outcome.SKIPPED,
                manual=manual,
                detail=f"run {previous} is still open",
            )
    tick = _record(schedule, tick_at, ScheduleTick.Outcome.STARTED, manual=manual)
    if tick is None:
        return None
    stamp = tick_at.strftime("%Y%m%dT%H%M%S.%fZ")
    try:
        with transaction.atomic():
            run = start_run(
                schedule.workflow,
                thread_id=f"schedule:{schedule.name}:{stamp}",
                input=schedule.input,
                actor=f"schedule:{schedule.name}",
            )
    except ControlError as exc:
        logger.warning("schedule %s: tick %s could not start: %s", schedule.name, stamp, exc)
        tick.outcome, tick.detail = ScheduleTick.Outcome.FAILED, f"{exc.code}: {exc.message}"
        tick.save(update_fields=["outcome", "detail"])
        return tick
    tick.run = run
    tick.save(update_fields=["run"])
    return tick


def _record(
    schedule: Schedule, tick_at: datetime, outcome: str, *, manual: bool = False, detail: str = ""
) -> ScheduleTick | None:
    """Insert the tick row; ``None`` when it exists (the unique key decided)."""
    try:
        with transaction.atomic():
            return ScheduleTick.objects.create(
                schedule=schedule, tick_at=tick_at, outcome=outcome, manual=manual, detail=detail
            )
    except IntegrityError:
        return None
