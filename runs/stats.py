"""The one statistics function of AgentOps: ``overview_stats()``.

The console's overview page renders it, and the JSON API and the metrics endpoint serve
the same dict (the habit of django-rq's ``get_statistics``), so the three never disagree.
Every figure is computed with a bounded number of queries (about a dozen, whatever the
number of runs); ages and durations are seconds measured against the database clock.
"""

import math
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import (
    Avg,
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    Min,
    OuterRef,
    Q,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce

from runs.engine.service import (
    configured_rate_limits,
    db_now,
    overdue,
    silent_by_design,
    waiting_by_limit,
    waiting_by_workflow,
)
from runs.models import Approval, Event, Run, ScheduleTick, Step, Takeover
from runs.states import RUN_EXECUTABLE, RUN_STATE_EVENTS, RUN_TERMINAL, RunStatus, StepStatus
from runs.storage_stats import storage_by_workflow

#: Run states in which a run is expected to make progress by itself; a run in one of them
#: with no event for ``AGENTOPS_STUCK_SECONDS`` is stuck even before the watchdog flags it.
PROGRESSING_STATES = (
    RunStatus.PENDING,
    RunStatus.RUNNING,
    RunStatus.WAITING_EXTERNAL,
    RunStatus.CANCEL_REQUESTED,
)
NON_TERMINAL_STATES = tuple(s for s in RunStatus.values if s not in RUN_TERMINAL)
#: At most this many recently active runs are examined for a loop, so the check costs
#: the same whatever the number of open runs.
LOOP_SCAN_RUNS = 500

#: Event types counted per time window, and the key each count is reported under.
WINDOW_EVENTS = {
    "step.started": "steps_started",
    "step.succeeded": "steps_succeeded",
    "step.failed": "steps_failed",
    "step.retry_scheduled": "retries",
    "lease.expired": "lease_expiries",
    "step.commit_rejected": "stale_writes_rejected",
    "transition.rejected": "terminal_overwrites_rejected",
    "takeover.opened": "takeovers_opened",
    "run.created": "runs_created",
}
WINDOWS = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
#: Upper bound on the finished steps read for duration percentiles (newest first).
DURATION_SAMPLE = 20000


def stuck_q(now: datetime) -> Q:
    """Runs that are stuck at ``now``: flagged by the watchdog (``stuck_since``), or in a
    progressing state with no event for longer than ``AGENTOPS_STUCK_SECONDS`` and not
    silent by design (``watchdog.silent_by_design``: a timer or a signal wait still
    ahead, open child runs)."""
    quiet_since = now - timedelta(seconds=settings.AGENTOPS_STUCK_SECONDS)
    return Q(status__in=NON_TERMINAL_STATES) & (
        Q(stuck_since__isnull=False)
        | (Q(status__in=PROGRESSING_STATES, last_event_at__lt=quiet_since) & ~silent_by_design(now))
    )


def looping_run_ids(now: datetime, min_repeats: int | None = None) -> list:
    """Ids of runs going round in circles at ``now``: in a progressing state, with an
    event within ``AGENTOPS_STUCK_SECONDS`` (a quieter run is reported stuck instead, see
    ``stuck_q``), whose current generation ran one step name at least ``min_repeats``
    times (``AGENTOPS_LOOP_REPEATS``).

    Bounded: only the ``LOOP_SCAN_RUNS`` most recently active such runs are examined
    (index ``run_status_last_event``), then their steps (one index range per run).
    """
    repeats = min_repeats or settings.AGENTOPS_LOOP_REPEATS
    active_since = now - timedelta(seconds=settings.AGENTOPS_STUCK_SECONDS)
    candidates = (
        Run.objects.filter(status__in=PROGRESSING_STATES, last_event_at__gte=active_since)
        .order_by("-last_event_at", "-pk")
        .values("pk")[:LOOP_SCAN_RUNS]
    )
    return list(
        Step.objects.filter(run_id__in=candidates, generation=F("run__generation"))
        .values("run_id", "name")
        .annotate(n=Count("id"))
        .filter(n__gte=repeats)
        .order_by()
        .values_list("run_id", flat=True)
        .distinct()
    )


def percentile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile (``fraction`` in 0..1) of ``values``; ``None`` if empty."""
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered), max(1, math.ceil(fraction * len(ordered)))) - 1
    return ordered[index]


def _ratio(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 4) if denominator else None


def _seconds(delta: timedelta) -> float:
    return round(delta.total_seconds(), 3)


def spread(query, group: str, duration: str, fractions: tuple[float, ...]) -> dict:
    """Per ``group`` value, the count, the maximum and nearest-rank percentiles (seconds,
    rounded to ms) of the DurationField annotation ``duration`` of ``query``:
    ``{value: {"count": n, "max": s, 0.5: s, ...}}``.

    On PostgreSQL the database aggregates (``percentile_disc`` over the query as a
    subquery), so only one row per group crosses the wire, however many rows there are;
    elsewhere the durations are read and ranked here.
    """
    query = query.values(group, duration)
    if connection.vendor == "postgresql":
        sql, params = query.query.sql_with_params()
        seconds = f'EXTRACT(EPOCH FROM t."{duration}")'
        ranks = ", ".join(
            f"percentile_disc({float(f)}) WITHIN GROUP (ORDER BY {seconds})" for f in fractions
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f'SELECT t."{group}", count(*), max({seconds}), {ranks} '
                f'FROM ({sql}) t GROUP BY t."{group}"',
                params,
            )
            rows = cursor.fetchall()
        return {
            row[0]: {
                "count": row[1],
                "max": round(float(row[2]), 3),
                **{f: round(float(v), 3) for f, v in zip(fractions, row[3:], strict=True)},
            }
            for row in rows
        }
    values: dict[Any, list[float]] = {}
    for key, delta in query.values_list(group, duration):
        values.setdefault(key, []).append(_seconds(delta))
    return {
        key: {
            "count": len(found),
            "max": max(found),
            **{f: percentile(found, f) for f in fractions},
        }
        for key, found in values.items()
    }


def overview_stats(now: datetime | None = None, *, storage: bool = True) -> dict[str, Any]:
    """All overview figures as a JSON-serialisable dict.

    ``now`` defaults to the database clock. Keys:

    - ``generated_at`` (ISO time), ``runs_total``;
    - ``runs_by_state``: ``[{state, count, oldest_s, p50_s}]`` for every run state, with the
      time spent in the current state (since its last ``run.*`` event) for non-terminal ones;
    - ``stuck_runs``, ``looping_runs``, ``unknown_steps``, ``takeovers_open``,
      ``approvals_pending``, ``approval_oldest_s``;
    - ``windows``: ``{"hour"|"day": {steps_started, steps_succeeded, steps_failed, retries,
      lease_expiries, stale_writes_rejected, terminal_overwrites_rejected, takeovers_opened,
      runs_created, step_success_rate, retry_rate, takeover_rate}}``; rates are 0..1 or
      ``None`` when there is nothing to divide by;
    - ``step_durations``: ``[{name, count, p50_s, p95_s}]`` of steps that succeeded in the
      last day, from their first start to their finish (retries included);
    - ``cancel_to_cancelled``: ``{count, p50_s, max_s}`` for runs cancelled in the last day;
    - ``per_run``: ``{runs, model_calls_avg, tool_calls_avg, cost_usd_avg}`` over runs
      created in the last day (cost as a decimal string);
    - ``queue_depth``: steps due now and waiting for a worker (PENDING, ``not_before``
      passed, in a run that may execute);
    - ``signal_waits``, ``signal_wait_oldest_s``, ``timers_sleeping``,
      ``timer_oldest_s``, ``schedule_missed_ticks`` (``wait_stats``, missed ticks of the
      last day);
    - ``limit_waits``: ``{"concurrency": {workflow or "<workflow>.<step>": runs or
      steps}, "rate": {limit: calls}}`` waiting on a concurrency or rate limit now
      (``limit_waits``); ``rate_limits``: the names of the rate limits in force (setting and admin);
    - ``storage``: ``[{workflow, db_bytes, payload_bytes, artifact_bytes}]``
      (``runs.storage_stats``, cached for a minute); ``None`` with ``storage=False``:
      counting scans every stored row, so the console loads it as a panel of its own
      rather than make the page wait.
    """
    now = now or db_now()
    day_ago = now - WINDOWS["day"]

    counts = dict(Run.objects.values_list("status").annotate(n=Count("id")).order_by())
    entered = Subquery(
        Event.objects.filter(run=OuterRef("pk"), type__in=RUN_STATE_EVENTS)
        .order_by("-seq")
        .values("created_at")[:1]
    )
    ages = spread(
        Run.objects.filter(status__in=NON_TERMINAL_STATES).annotate(
            in_state=ExpressionWrapper(
                Value(now, output_field=DateTimeField()) - Coalesce(entered, F("created_at")),
                output_field=DurationField(),
            )
        ),
        "status",
        "in_state",
        (0.5,),
    )
    runs_by_state = []
    for state in RunStatus.values:
        state_ages = ages.get(state, {})
        runs_by_state.append(
            {
                "state": state,
                "count": counts.get(state, 0),
                "oldest_s": state_ages.get("max"),
                "p50_s": state_ages.get(0.5),
            }
        )

    # One past its deadline is expired, sweep or not: it waits for nobody.
    pending = (
        Approval.objects.filter(status=Approval.Status.PENDING)
        .exclude(overdue())
        .aggregate(n=Count("id"), oldest=Min("created_at"))
    )

    window_counts = Event.objects.filter(
        created_at__gte=day_ago, type__in=list(WINDOW_EVENTS)
    ).aggregate(
        **{
            f"{key}__{window}": Count("id", filter=Q(type=etype, created_at__gte=now - span))
            for etype, key in WINDOW_EVENTS.items()
            for window, span in WINDOWS.items()
        }
    )
    windows = {}
    for window in WINDOWS:
        figures = {key: window_counts[f"{key}__{window}"] for key in WINDOW_EVENTS.values()}
        finished = figures["steps_succeeded"] + figures["steps_failed"]
        figures["step_success_rate"] = _ratio(figures["steps_succeeded"], finished)
        figures["retry_rate"] = _ratio(figures["retries"], figures["steps_started"])
        figures["takeover_rate"] = _ratio(figures["takeovers_opened"], figures["runs_created"])
        windows[window] = figures

    # The newest DURATION_SAMPLE steps that succeeded in the last day.
    durations = spread(
        Step.objects.filter(
            status=StepStatus.SUCCEEDED, finished_at__gte=day_ago, started_at__isnull=False
        )
        .annotate(
            took=ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
        )
        .order_by("-finished_at", "-pk")[:DURATION_SAMPLE],
        "name",
        "took",
        (0.5, 0.95),
    )
    step_durations = [
        {"name": name, "count": row["count"], "p50_s": row[0.5], "p95_s": row[0.95]}
        for name, row in sorted(durations.items())
    ]

    cancel_times = [
        _seconds(finished - requested)
        for requested, finished in Run.objects.filter(
            status=RunStatus.CANCELLED,
            finished_at__gte=day_ago,
            cancel_requested_at__isnull=False,
        ).values_list("cancel_requested_at", "finished_at")
        if requested is not None and finished is not None
    ]
    per_run = Run.objects.filter(created_at__gte=day_ago).aggregate(
        runs=Count("id"),
        model_calls_avg=Avg("model_calls"),
        tool_calls_avg=Avg("tool_calls"),
        cost_usd_avg=Avg("cost_usd"),
    )

    return {
        "generated_at": now.isoformat(),
        "runs_total": sum(counts.values()),
        "runs_by_state": runs_by_state,
        "stuck_runs": Run.objects.filter(stuck_q(now)).count(),
        "looping_runs": len(looping_run_ids(now)),
        "unknown_steps": Step.objects.filter(
            status=StepStatus.UNKNOWN, run__status__in=NON_TERMINAL_STATES
        ).count(),
        "takeovers_open": Takeover.objects.filter(status=Takeover.Status.OPEN).count(),
        "approvals_pending": pending["n"],
        "approval_oldest_s": _seconds(now - pending["oldest"]) if pending["oldest"] else None,
        "windows": windows,
        "step_durations": step_durations,
        "cancel_to_cancelled": {
            "count": len(cancel_times),
            "p50_s": percentile(cancel_times, 0.5),
            "max_s": max(cancel_times) if cancel_times else None,
        },
        "per_run": {
            "runs": per_run["runs"],
            "model_calls_avg": _round(per_run["model_calls_avg"]),
            "tool_calls_avg": _round(per_run["tool_calls_avg"]),
            "cost_usd_avg": str(Decimal(per_run["cost_usd_avg"]).quantize(Decimal("0.000001")))
            if per_run["cost_usd_avg"] is not None
            else None,
        },
        "queue_depth": Step.objects.filter(
            status=StepStatus.PENDING, not_before__lte=now, run__status__in=RUN_EXECUTABLE
        ).count(),
        **wait_stats(now, day_ago),
        "limit_waits": limit_waits(),
        "rate_limits": sorted(configured_rate_limits()),
        "storage": storage_by_workflow() if storage else None,
    }


def limit_waits() -> dict[str, dict[str, int]]:
    """What waits on a limit now: ``{"concurrency": {workflow: PENDING runs whose key
    has every place taken, "<workflow>.<step>": PENDING steps likewise}, "rate": {limit
    name: calls waiting for a place}}``."""
    return {
        "concurrency": waiting_by_workflow(),
        "rate": waiting_by_limit(),
    }


def wait_stats(now: datetime, since: datetime) -> dict[str, Any]:
    """Runs waiting with no worker: ``signal_waits`` (runs waiting for a signal) and
    ``signal_wait_oldest_s`` (since the oldest of those waits began), ``timers_sleeping``
    (steps held back by a durable timer) and ``timer_oldest_s`` (since the oldest was
    set), and ``schedule_missed_ticks``: ``{schedule name: ticks missed since
    ``since``}`` of the schedules that missed any."""
    waits = Event.objects.filter(
        type="step.waiting",
        step__status=StepStatus.WAITING,
        run__status=RunStatus.WAITING_EXTERNAL,
    ).exclude(step__signal_name="")
    signal = waits.aggregate(n=Count("step_id", distinct=True), oldest=Min("created_at"))
    timers = Step.objects.filter(
        status=StepStatus.PENDING,
        attempt=0,
        not_before__gt=now,
        run__status__in=RUN_EXECUTABLE,
    ).aggregate(n=Count("id"), oldest=Min("created_at"))
    missed = dict(
        ScheduleTick.objects.filter(outcome=ScheduleTick.Outcome.MISSED, created_at__gte=since)
        .values_list("schedule__name")
        .annotate(n=Count("id"))
        .order_by()
    )
    return {
        "signal_waits": signal["n"],
        "signal_wait_oldest_s": _seconds(now - signal["oldest"]) if signal["oldest"] else None,
        "timers_sleeping": timers["n"],
        "timer_oldest_s": _seconds(now - timers["oldest"]) if timers["oldest"] else None,
        "schedule_missed_ticks": missed,
    }


def _round(value) -> float | None:
    return None if value is None else round(float(value), 3)


# -- time series for the console's pictures ---------------------------------------------

#: Event types of a finished step attempt, counted per worker.
ATTEMPT_END_EVENTS = ("step.succeeded", "step.failed", "step.retry_scheduled")
#: The open (non-terminal) run states, in the order the overview draws them.
OPEN_STATES = tuple(s for s in RunStatus.values if s not in RUN_TERMINAL)


def time_buckets(now: datetime, count: int, minutes: int) -> list[datetime]:
    """The starts of ``count`` buckets of ``minutes`` each, aligned to UTC multiples of
    ``minutes``, the last one containing ``now``, oldest first."""
    floor = now.replace(second=0, microsecond=0)
    floor -= timedelta(minutes=floor.minute % minutes)
    return [floor - timedelta(minutes=minutes * (count - 1 - i)) for i in range(count)]


def _per_minute(queryset, *fields: str):
    """``queryset`` grouped by the minute of ``created_at`` and ``fields``, counted: rows
    ``(minute, *fields, n)``; one query, at most one row per minute and group."""
    from django.db.models.functions import TruncMinute

    return (
        queryset.annotate(minute=TruncMinute("created_at"))
        .values_list("minute", *fields)
        .annotate(n=Count("id"))
        .order_by()
    )


def _bucket_index(starts: list[datetime], minutes: int, moment: datetime) -> int | None:
    if moment < starts[0]:
        return None
    index = int((moment - starts[0]).total_seconds() // (minutes * 60))
    return index if index < len(starts) else None


def step_outcome_series(
    now: datetime | None = None, hours: int = 6, minutes: int = 5
) -> tuple[list[datetime], dict[str, list[int]]]:
    """Steps that succeeded and failed (a final failure or a failed attempt that will
    be retried) per ``minutes`` over the last ``hours``: ``(bucket starts, {"succeeded":
    [...], "failed": [...]})``. One grouped query (index ``event_type_created``)."""
    now = now or db_now()
    starts = time_buckets(now, hours * 60 // minutes, minutes)
    series = {"succeeded": [0] * len(starts), "failed": [0] * len(starts)}
    rows = _per_minute(
        Event.objects.filter(
            type__in=["step.succeeded", *ATTEMPT_END_EVENTS[1:]], created_at__gte=starts[0]
        ),
        "type",
    )
    for minute, type_, n in rows:
        index = _bucket_index(starts, minutes, minute)
        if index is not None:
            series["succeeded" if type_ == "step.succeeded" else "failed"][index] += n
    return starts, series


def open_runs_series(
    now: datetime | None = None, hours: int = 6, minutes: int = 5
) -> tuple[list[datetime], dict[str, list[int]]]:
    """Open runs by state at the end of each ``minutes`` bucket over the last ``hours``:
    ``(bucket starts, {state: [...]})`` for the non-terminal states. Worked back from
    today's counts through the run transitions recorded since (every transition writes
    ``run.<state>`` with its ``from`` state; ``run.created`` enters PENDING): two
    grouped queries, whatever the number of runs."""
    now = now or db_now()
    starts = time_buckets(now, hours * 60 // minutes, minutes)
    current = dict(
        Run.objects.filter(status__in=OPEN_STATES)
        .values_list("status")
        .annotate(n=Count("id"))
        .order_by()
    )
    # net[i][state]: runs that entered ``state`` minus those that left it in bucket i.
    net = [dict.fromkeys(OPEN_STATES, 0) for _ in starts]
    rows = _per_minute(
        Event.objects.filter(type__in=RUN_STATE_EVENTS, created_at__gte=starts[0]),
        "type",
        "payload__from",
    )
    for minute, type_, source, n in rows:
        target = RunStatus.PENDING if type_ == "run.created" else type_.split(".", 1)[1].upper()
        index = _bucket_index(starts, minutes, minute)
        if index is None:
            continue
        if target in net[index]:
            net[index][target] += n
        if source in net[index]:
            net[index][source] -= n
    # changes[i]: the net change after the end of bucket i (the later buckets' sum).
    changes = [dict.fromkeys(OPEN_STATES, 0) for _ in starts]
    for i in range(len(starts) - 2, -1, -1):
        for state in OPEN_STATES:
            changes[i][state] = changes[i + 1][state] + net[i + 1][state]
    series = {
        state: [max(current.get(state, 0) - changes[i][state], 0) for i in range(len(starts))]
        for state in OPEN_STATES
    }
    return starts, series


def worker_steps_series(
    now: datetime | None = None, minutes: int = 30, top: int = 6
) -> tuple[list[datetime], dict[str, list[int]]]:
    """Step attempts finished per minute per worker over the last ``minutes``:
    ``(minute starts, {worker id: [...]})``, the ``top`` busiest workers by name and the
    rest summed as ``"other workers"``. One grouped query."""
    now = now or db_now()
    starts = time_buckets(now, minutes, 1)
    rows = _per_minute(
        Event.objects.filter(type__in=ATTEMPT_END_EVENTS, created_at__gte=starts[0])
        # A person finishing a step (an approval, "mark done") is not a worker.
        .exclude(actor__startswith="user:")
        .exclude(actor="cli"),
        "actor",
    )
    per_worker: dict[str, list[int]] = {}
    for minute, actor, n in rows:
        index = _bucket_index(starts, 1, minute)
        if index is not None:
            per_worker.setdefault(actor or "?", [0] * len(starts))[index] += n
    ranked = sorted(per_worker, key=lambda w: (-sum(per_worker[w]), w))
    series = {w: per_worker[w] for w in sorted(ranked[:top])}
    if len(ranked) > top:
        series["other workers"] = [
            sum(per_worker[w][i] for w in ranked[top:]) for i in range(len(starts))
        ]
    return starts, series
