"""Django admin for approvals and takeovers.

Statuses are never edited here. Approvals can be decided with admin actions that call
``approvals.services.decide`` (approver permission checked there); takeovers are
resolved on the console's takeover desk, which asks for the reason and evidence.
"""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils.html import format_html

from approvals.services import decide
from runs.admin import ReadOnlyAdmin
from runs.engine.service import ControlError
from runs.models import Approval, Takeover


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "run",
        "step",
        "status",
        "question",
        "created_at",
        "expires_at",
        "decided_by",
        "decided_at",
    )
    list_filter = ("status", "created_at")
    search_fields = ("=run__id", "run__thread__thread_id", "question")
    list_select_related = ("run", "step", "decided_by")
    actions = ["approve_action", "reject_action"]

    def has_decide_permission(self, request):
        return request.user.has_perm("runs.decide_approval")

    @admin.action(description="Approve (engine decide)", permissions=["decide"])
    def approve_action(self, request, queryset):
        self._decide(request, queryset, "approve")

    @admin.action(description="Reject (engine decide)", permissions=["decide"])
    def reject_action(self, request, queryset):
        self._decide(request, queryset, "reject")

    def _decide(self, request, queryset, decision: str) -> None:
        done, refused = 0, []
        for approval in queryset:
            try:
                decide(
                    approval,
                    decision=decision,
                    user=request.user,
                    comment="decided from the Django admin",
                )
                done += 1
            except (ControlError, PermissionDenied) as exc:
                refused.append(f"{approval.pk}: {exc}")
        self.message_user(request, f"{done} approval(s): {decision}.", messages.SUCCESS)
        if refused:
            self.message_user(request, "Refused: " + "; ".join(refused[:20]), messages.WARNING)


@admin.register(Takeover)
class TakeoverAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "run",
        "cause",
        "status",
        "claimed_by",
        "created_at",
        "resolution",
        "resolved_by",
        "resolved_at",
        "desk_link",
    )
    list_filter = ("status", "cause", "resolution")
    search_fields = ("=run__id", "run__thread__thread_id", "reason")
    list_select_related = ("run", "claimed_by")

    @admin.display(description="Resolve")
    def desk_link(self, obj):
        url = reverse("console:takeovers") + f"?run={obj.run_id}#takeover-{obj.pk}"
        return format_html('<a href="{}">takeover desk</a>', url)
