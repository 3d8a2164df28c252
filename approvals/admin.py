"""Django admin for approvals and takeovers: inspection only; decisions and resolutions
go through the console or CLI so they are checked and recorded as events."""

from django.contrib import admin

from approvals.models import Approval, Takeover
from runs.admin import ReadOnlyAdmin


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "step", "status", "decided_by", "decided_at", "expires_at", "created_at")
    list_filter = ("status",)
    search_fields = ("run__id", "run__thread__thread_id", "question")
    list_select_related = ("run", "step", "decided_by")


@admin.register(Takeover)
class TakeoverAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "cause", "status", "failed_at", "claimed_by", "resolution", "created_at")
    list_filter = ("status", "cause")
    search_fields = ("run__id", "run__thread__thread_id", "reason")
    list_select_related = ("run", "claimed_by")
