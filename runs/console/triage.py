"""The triage inbox: everything that needs a human, grouped by cause, oldest first.

Each group is one bounded query (plus a count), so the inbox costs the same number of
queries whatever the number of runs. Items are plain dicts for the template:
``{run, since, title, detail, suggested, url, action}``.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.urls import reverse

from runs.models import Approval, Run, Step, Takeover
from runs.states import RUN_EXECUTABLE, StepStatus
from runs.stats import NON_TERMINAL_STATES, looping_run_ids, stuck_q

#: Items shown per group; the group header gives the full count.
GROUP_LIMIT = 50


@dataclass
class TriageGroup:
    """One cause: its key, a heading, how many items exist, and the oldest ones."""

    cause: str
    title: str
    total: int = 0
    items: list[dict] = field(default_factory=list)


def _run_url(run_id) -> str:
    return reverse("console:run", args=[run_id])


def _unknown_outcomes() -> TriageGroup:
    group = TriageGroup("unknown_outcome", "Unknown outcome")
    query = Step.objects.filter(
        status=StepStatus.UNKNOWN, run__status__in=NON_TERMINAL_STATES
    ).annotate(since=Coalesce("heartbeat_at", "started_at", "created_at"))
    group.total = query.count()
    for step in query.select_related("run").order_by("since", "pk")[:GROUP_LIMIT]:
        group.items.append(
            {
                "run": step.run,
                "since": step.since,
                "title": f"{step.name}: outcome unknown",
                "detail": step.error_detail
                or "a side effect may have happened; its result was not saved",
                "suggested": "Check the outside world now, then resolve done or not done.",
                "url": reverse("console:unknowns") + f"#step-{step.pk}",
                "action": "Verify and resolve",
            }
        )
    return group


def _overdue_approvals(now: datetime) -> TriageGroup:
    group = TriageGroup("approval_overdue", "Approval overdue")
    overdue_before = now - timedelta(seconds=settings.AGENTOPS_APPROVAL_OVERDUE_SECONDS)
    query = Approval.objects.filter(
        Q(expires_at__lt=now) | Q(expires_at__isnull=True, created_at__lt=overdue_before),
        status=Approval.Status.PENDING,
    )
    group.total = query.count()
    for approval in query.select_related("run").order_by("created_at", "pk")[:GROUP_LIMIT]:
        group.items.append(
            {
                "run": approval.run,
                "since": approval.created_at,
                "title": approval.question,
                "detail": approval.reason,
                "suggested": (
                    "Expired: it can no longer be decided; the sweeper takes its expiry "
                    "route (is the sweeper running?)."
                    if approval.expires_at is not None and approval.expires_at < now
                    else "Approve or reject it (approver role)."
                ),
                "url": reverse("console:approvals")
                + f"?run={approval.run_id}#approval-{approval.pk}",
                "action": "Open"
                if approval.expires_at is not None and approval.expires_at < now
                else "Decide",
            }
        )
    return group


def _takeovers(cause: str, title: str, suggested: str, causes: list[str]) -> TriageGroup:
    group = TriageGroup(cause, title)
    query = Takeover.objects.filter(status=Takeover.Status.OPEN, cause__in=causes)
    group.total = query.count()
    for takeover in query.select_related("run").order_by("created_at", "pk")[:GROUP_LIMIT]:
        group.items.append(
            {
                "run": takeover.run,
                "since": takeover.created_at,
                "title": takeover.reason,
                "detail": takeover.failed_at and f"failed at {takeover.failed_at}",
                "suggested": takeover.suggested_action or suggested,
                "url": reverse("console:takeovers")
                + f"?run={takeover.run_id}#takeover-{takeover.pk}",
                "action": "Take over",
            }
        )
    return group


def _lease_expired(now: datetime) -> TriageGroup:
    group = TriageGroup("lease_expired", "Lease expired, no taker")
    waiting_since = now - timedelta(seconds=settings.AGENTOPS_STUCK_SECONDS)
    query = Step.objects.filter(
        Q(status=StepStatus.RUNNING, lease_until__lt=now)
        | Q(status=StepStatus.PENDING, not_before__lt=waiting_since),
        run__status__in=RUN_EXECUTABLE,
    ).annotate(since=Coalesce("lease_until", "not_before"))
    group.total = query.count()
    for step in query.select_related("run").order_by("since", "pk")[:GROUP_LIMIT]:
        held = (
            f"last held by {step.owner}, attempt {step.attempt}" if step.owner else "never claimed"
        )
        group.items.append(
            {
                "run": step.run,
                "since": step.since,
                "title": f"{step.name} ({step.status})",
                "detail": held,
                "suggested": "Check that workers are running; re-dispatch the run.",
                "url": _run_url(step.run_id),
                "action": "Open run",
            }
        )
    return group


def _no_progress(now: datetime) -> TriageGroup:
    group = TriageGroup("no_progress", "No progress (stuck or looping)")
    query = Run.objects.filter(stuck_q(now) | Q(pk__in=looping_run_ids(now)))
    group.total = query.count()
    for run in query.annotate(
        since=Coalesce("stuck_since", "last_event_at", "created_at")
    ).order_by("since", "pk")[:GROUP_LIMIT]:
        group.items.append(
            {
                "run": run,
                "since": run.since,
                "title": f"{run.workflow} is {run.status}",
                "detail": "flagged stuck by the watchdog"
                if run.stuck_since
                else "no new event for a long time, or one step keeps repeating",
                "suggested": "Open the timeline; cancel, or re-dispatch if its worker died.",
                "url": _run_url(run.pk),
                "action": "Open run",
            }
        )
    return group


def triage_groups(now: datetime) -> list[TriageGroup]:
    """All groups in the inbox's order of urgency; empty groups included (shown as clear)."""
    cause = Takeover.Cause
    return [
        _unknown_outcomes(),
        _overdue_approvals(now),
        _takeovers(
            "retries_exhausted",
            "Retries exhausted",
            "Check the dependency, then retry the step.",
            [cause.RETRIES_EXHAUSTED],
        ),
        _takeovers(
            "budget_exhausted",
            "Budget exhausted",
            "Raise the budget, then resume.",
            [cause.BUDGET_EXHAUSTED],
        ),
        _lease_expired(now),
        _no_progress(now),
        _takeovers(
            "unknown_workflow_version",
            "Unknown workflow version",
            "Deploy code with this version, then resolve.",
            [cause.UNKNOWN_WORKFLOW_VERSION],
        ),
        _takeovers(
            "other_takeover",
            "Other takeovers (artifact invalid, non-determinism, operator request)",
            "Read the evidence and resolve.",
            [cause.ARTIFACT_INVALID, cause.NON_DETERMINISM, cause.OPERATOR_REQUEST],
        ),
    ]
