"""``GET /metrics``: the overview's figures in the Prometheus text format.

Every figure comes from ``runs.stats.overview_stats()`` (the one statistics function,
shared with the console overview), turned into gauges at scrape time by a custom
collector, so nothing is counted twice and several server processes agree. Labels are
bounded sets (run state, step name, window, kind); no run ids.

Protection: requests must send ``Authorization: Bearer <AGENTOPS_METRICS_TOKEN>``; with
the setting unset the endpoint answers 403, so metrics are never public by accident.
"""

import secrets

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

WINDOW_KINDS = (
    "steps_started",
    "steps_succeeded",
    "steps_failed",
    "retries",
    "lease_expiries",
    "stale_writes_rejected",
    "terminal_overwrites_rejected",
    "takeovers_opened",
    "runs_created",
)
RATIOS = {
    "step_success_rate": "agentops_step_success_ratio",
    "retry_rate": "agentops_retry_ratio",
    "takeover_rate": "agentops_takeover_ratio",
}


def _gauge(name: str, doc: str, value, labels: dict | None = None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    if value is not None:
        family.add_metric(list((labels or {}).values()), float(value))
    return family


def metric_families(stats: dict) -> list[GaugeMetricFamily]:
    """The gauges for one ``overview_stats()`` dict (see its docstring for the keys)."""
    runs = GaugeMetricFamily("agentops_runs", "Runs by current state.", labels=["state"])
    oldest = GaugeMetricFamily(
        "agentops_run_state_oldest_seconds",
        "Age in its state of the oldest non-terminal run.",
        labels=["state"],
    )
    for row in stats["runs_by_state"]:
        runs.add_metric([row["state"]], row["count"])
        if row.get("oldest_s") is not None:
            oldest.add_metric([row["state"]], row["oldest_s"])
    families = [
        runs,
        oldest,
        _gauge("agentops_runs_stuck", "Runs with no progress for too long.", stats["stuck_runs"]),
        _gauge(
            "agentops_runs_looping",
            "Runs repeating one step without finishing.",
            stats["looping_runs"],
        ),
        _gauge(
            "agentops_steps_unknown",
            "Steps whose side-effect outcome is unknown.",
            stats["unknown_steps"],
        ),
        _gauge(
            "agentops_takeovers_open", "Runs paused for a human takeover.", stats["takeovers_open"]
        ),
        _gauge(
            "agentops_approvals_pending",
            "Approvals waiting for a decision.",
            stats["approvals_pending"],
        ),
        _gauge("agentops_queue_depth", "Steps due and waiting for a worker.", stats["queue_depth"]),
        _gauge(
            "agentops_approval_oldest_seconds",
            "Age of the oldest pending approval.",
            stats["approval_oldest_s"],
        ),
        _gauge(
            "agentops_signal_waits",
            "Runs waiting for a signal, no worker held.",
            stats["signal_waits"],
        ),
        _gauge(
            "agentops_signal_wait_oldest_seconds",
            "Age of the oldest signal wait.",
            stats["signal_wait_oldest_s"],
        ),
        _gauge(
            "agentops_timers_sleeping",
            "Steps held back by a durable timer.",
            stats["timers_sleeping"],
        ),
        _gauge(
            "agentops_timer_oldest_seconds",
            "Age of the oldest durable timer.",
            stats["timer_oldest_s"],
        ),
    ]
    missed = GaugeMetricFamily(
        "agentops_schedule_missed_ticks",
        "Schedule ticks missed (left out by catch-up) in the last day.",
        labels=["schedule"],
    )
    for name, count in sorted(stats["schedule_missed_ticks"].items()):
        missed.add_metric([name], count)
    families.append(missed)
    events = GaugeMetricFamily(
        "agentops_window_events",
        "Engine events in the trailing window (step outcomes, retries, lease expiries, "
        "rejected stale writes and terminal overwrites, takeovers, runs created).",
        labels=["window", "kind"],
    )
    ratios = {
        key: GaugeMetricFamily(
            name, f"{key.replace('_', ' ')} in the trailing window.", labels=["window"]
        )
        for key, name in RATIOS.items()
    }
    for window, figures in stats["windows"].items():
        for kind in WINDOW_KINDS:
            if kind in figures:
                events.add_metric([window, kind], figures[kind])
        for key, family in ratios.items():
            if figures.get(key) is not None:
                family.add_metric([window], figures[key])
    families += [events, *ratios.values()]
    durations = GaugeMetricFamily(
        "agentops_step_duration_seconds",
        "Duration of steps that succeeded in the last day, by step name (quantiles).",
        labels=["step", "quantile"],
    )
    duration_count = GaugeMetricFamily(
        "agentops_step_duration_samples",
        "Steps measured for agentops_step_duration_seconds.",
        labels=["step"],
    )
    for row in stats["step_durations"]:
        for quantile, key in (("0.5", "p50_s"), ("0.95", "p95_s")):
            if row.get(key) is not None:
                durations.add_metric([row["name"], quantile], row[key])
        duration_count.add_metric([row["name"]], row["count"])
    cancel = stats["cancel_to_cancelled"]
    latency = GaugeMetricFamily(
        "agentops_cancel_latency_seconds",
        "Cancel request to CANCELLED, runs cancelled in the last day.",
        labels=["quantile"],
    )
    for quantile, key in (("0.5", "p50_s"), ("1", "max_s")):
        if cancel.get(key) is not None:
            latency.add_metric([quantile], cancel[key])
    limit_waits = GaugeMetricFamily(
        "agentops_limit_waiting",
        "Waiting on a limit now: runs of a workflow (limit <workflow>) or steps (limit "
        "<workflow>.<step>) for a place of their concurrency key (kind concurrency), "
        "calls for a rate limit (kind rate).",
        labels=["kind", "limit"],
    )
    for kind, waiting in stats["limit_waits"].items():
        for limit, count in sorted(waiting.items()):
            limit_waits.add_metric([kind, limit], count)
    for limit in sorted(set(stats["rate_limits"]) - set(stats["limit_waits"]["rate"])):
        limit_waits.add_metric(["rate", limit], 0)
    families.append(limit_waits)
    per_run = stats["per_run"]
    storage = {
        key: GaugeMetricFamily(f"agentops_storage_{key}", doc, labels=["workflow"])
        for key, doc in (
            ("db_bytes", "Run data stored in the database, bytes, per workflow."),
            ("payload_bytes", "Of which large payloads stored once, bytes, per workflow."),
            ("artifact_bytes", "Artifact files, bytes, per workflow."),
        )
    }
    for row in stats["storage"]:
        for key, family in storage.items():
            family.add_metric([row["workflow"]], row[key])
    families += list(storage.values())
    families += [
        durations,
        duration_count,
        latency,
        _gauge("agentops_cancels_day", "Runs cancelled in the last day.", cancel["count"]),
        _gauge("agentops_runs_created_day", "Runs created in the last day.", per_run["runs"]),
        _gauge(
            "agentops_run_model_calls_avg",
            "Model calls per run (runs of the last day).",
            per_run["model_calls_avg"],
        ),
        _gauge(
            "agentops_run_tool_calls_avg",
            "Tool calls per run (runs of the last day).",
            per_run["tool_calls_avg"],
        ),
        _gauge(
            "agentops_run_cost_usd_avg",
            "Cost in USD per run (runs of the last day).",
            per_run["cost_usd_avg"],
        ),
    ]
    return families


class OverviewCollector:
    """A prometheus_client collector that reads ``overview_stats()`` on each scrape."""

    def collect(self):
        from runs.stats import overview_stats

        yield from metric_families(overview_stats())


@require_GET
def metrics_view(request):
    """Prometheus scrape endpoint; see the module docstring for protection."""
    expected = settings.AGENTOPS_METRICS_TOKEN
    if not expected:
        return JsonResponse(
            {
                "code": "metrics_disabled",
                "errors": {},
                "message": "set AGENTOPS_METRICS_TOKEN to enable /metrics",
            },
            status=403,
        )
    header = request.headers.get("Authorization", "")
    given = header[7:].strip() if header.lower().startswith("bearer ") else ""
    if not secrets.compare_digest(given.encode(), expected.encode()):
        return JsonResponse(
            {
                "code": "unauthorized",
                "errors": {},
                "message": "Authorization: Bearer <AGENTOPS_METRICS_TOKEN> required",
            },
            status=401,
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OverviewCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
