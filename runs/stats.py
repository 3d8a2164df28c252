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
from django.db.models import Avg, Count, F, Min, OuterRef, Q, Subquery

from runs.engine.state.clock import db_now
from runs.models import Event, Run, Step
from runs.states import RUN_EXECUTABLE, RUN_TERMINAL, RunStatus, StepStatus
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
#: Event types written by a run status transition (``run.<status>``) or its creation.
RUN_STATE_EVENTS = ["run.created", *(f"run.{s.lower()}" for s in RunStatus.values)]

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
    progressing state with no event for longer than ``AGENTOPS_STUCK_SECONDS``."""
    quiet_since = now - timedelta(seconds=settings.AGENTOPS_STUCK_SECONDS)
    return Q(status__in=NON_TERMINAL_STATES) & (
        Q(stuck_since__isnull=False)
        | Q(status__in=PROGRESSING_STATES, last_event_at__lt=quiet_since)
    )


def looping_run_ids(min_repeats: int | None = None):
    """A queryset of ids of non-terminal runs whose current generation ran one step name
    at least ``min_repeats`` times (``AGENTOPS_LOOP_REPEATS``): a workflow going round in
    circles without finishing."""
    repeats = min_repeats or settings.AGENTOPS_LOOP_REPEATS
    return (
        Step.objects.filter(run__status__in=NON_TERMINAL_STATES, generation=F("run__generation"))
        .values("run_id", "name")
        .annotate(n=Count("id"))
        .filter(n__gte=repeats)
        .values("run_id")
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


def overview_stats(now: datetime | None = None) -> dict[str, Any]:
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
    - ``storage``: ``[{workflow, db_bytes, payload_bytes, artifact_bytes}]``
      (``runs.storage_stats``, cached for a minute).
    """
    from approvals.models import Approval, Takeover

    now = now or db_now()
    day_ago = now - WINDOWS["day"]

    counts = dict(Run.objects.values_list("status").annotate(n=Count("id")).order_by())
    entered = Subquery(
        Event.objects.filter(run=OuterRef("pk"), type__in=RUN_STATE_EVENTS)
        .order_by("-seq")
        .values("created_at")[:1]
    )
    ages: dict[str, list[float]] = {}
    for status, since, created in (
        Run.objects.filter(status__in=NON_TERMINAL_STATES)
        .annotate(entered=entered)
        .values_list("status", "entered", "created_at")
    ):
        ages.setdefault(status, []).append(_seconds(now - (since or created)))
    runs_by_state = []
    for state in RunStatus.values:
        state_ages = ages.get(state, [])
        runs_by_state.append(
            {
                "state": state,
                "count": counts.get(state, 0),
                "oldest_s": max(state_ages) if state_ages else None,
                "p50_s": percentile(state_ages, 0.5),
            }
        )

    pending = Approval.objects.filter(status=Approval.Status.PENDING).aggregate(
        n=Count("id"), oldest=Min("created_at")
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

    durations: dict[str, list[float]] = {}
    for name, started, finished in (
        Step.objects.filter(
            status=StepStatus.SUCCEEDED, finished_at__gte=day_ago, started_at__isnull=False
        )
        .order_by("-finished_at")
        .values_list("name", "started_at", "finished_at")[:DURATION_SAMPLE]
    ):
        durations.setdefault(name, []).append(_seconds(finished - started))
    step_durations = [
        {
            "name": name,
            "count": len(values),
            "p50_s": percentile(values, 0.5),
            "p95_s": percentile(values, 0.95),
        }
        for name, values in sorted(durations.items())
    ]

    cancel_times = [
        _seconds(finished - requested)
        for requested, finished in Run.objects.filter(
            status=RunStatus.CANCELLED,
            finished_at__gte=day_ago,
            cancel_requested_at__isnull=False,
        ).values_list("cancel_requested_at", "finished_at")
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
        "looping_runs": looping_run_ids().count(),
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
        "storage": storage_by_workflow(),
    }


def _round(value) -> float | None:
    return None if value is None else round(float(value), 3)
