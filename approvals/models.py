"""Human interventions: approval requests and takeovers."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from runs.checked_fields import CheckedCharField, CheckedJSONField, CheckedTextField
from runs.state_fields import StateGuardedQuerySet


class Approval(models.Model):
    """A question to an approver that a run waits on (run status WAITING_APPROVAL).

    ``routes`` is ``{"approve": step or None, "reject": step or None, "expire": step or
    None}``, fixed by the worker that asked (it knew the workflow), so a decision needs
    no workflow code. CANCELLED: the run was cancelled or resumed elsewhere meanwhile.
    """

    class Status(models.TextChoices):
        PENDING = "PENDING"
        APPROVED = "APPROVED"
        REJECTED = "REJECTED"
        EXPIRED = "EXPIRED"
        CANCELLED = "CANCELLED"

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="approvals")
    step = models.ForeignKey("runs.Step", on_delete=models.CASCADE, related_name="approvals")
    question = CheckedTextField()
    reason = CheckedTextField(blank=True, default="")
    evidence = CheckedJSONField(default=dict, blank=True)
    status = CheckedCharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = CheckedTextField(blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    routes = CheckedJSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    objects = StateGuardedQuerySet.as_manager()

    class Meta:
        permissions = [("decide_approval", "Can approve or reject approval requests")]
        indexes = [
            # Approvals inbox and the sweeper's expiry query: pending ones by age / expiry.
            models.Index(fields=["status", "expires_at"], name="approval_status_expiry"),
        ]

    def __str__(self) -> str:
        return f"approval {self.pk} ({self.status})"


class Takeover(models.Model):
    """A run paused for a human: why, what was done, where it failed, what to do next."""

    class Status(models.TextChoices):
        OPEN = "OPEN"
        RESOLVED = "RESOLVED"

    class Cause(models.TextChoices):
        UNKNOWN_OUTCOME = "unknown_outcome"
        RETRIES_EXHAUSTED = "retries_exhausted"
        BUDGET_EXHAUSTED = "budget_exhausted"
        UNKNOWN_WORKFLOW_VERSION = "unknown_workflow_version"
        ARTIFACT_INVALID = "artifact_invalid"
        OPERATOR_REQUEST = "operator_request"
        NON_DETERMINISM = "non_determinism"

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="takeovers")
    step = models.ForeignKey(
        "runs.Step", null=True, blank=True, on_delete=models.SET_NULL, related_name="takeovers"
    )
    cause = CheckedCharField(max_length=40, choices=Cause.choices)
    reason = CheckedTextField()
    done_summary = CheckedJSONField(default=dict, blank=True)
    failed_at = CheckedCharField(max_length=200, blank=True, default="")
    suggested_action = CheckedTextField(blank=True, default="")
    evidence = CheckedJSONField(default=dict, blank=True)
    checkpoints = CheckedJSONField(default=list, blank=True)
    status = CheckedCharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    resolution = CheckedCharField(max_length=40, blank=True, default="")
    resolution_note = CheckedTextField(blank=True, default="")
    resolved_by = CheckedCharField(max_length=200, blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    objects = StateGuardedQuerySet.as_manager()

    class Meta:
        constraints = [
            # One open takeover per run: a second pause reason updates the open one.
            models.UniqueConstraint(
                fields=["run"], condition=Q(status="OPEN"), name="takeover_one_open_per_run"
            ),
        ]

    def __str__(self) -> str:
        return f"takeover {self.pk} ({self.cause}, {self.status})"
