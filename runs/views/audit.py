"""The audit log: every operator action (events whose actor is a person or the CLI),
filterable by user, action and run."""

from django.core.paginator import Paginator
from django.db.models import Q

from runs.console.access import console_view, render_page
from runs.console.filters import AuditFilter
from runs.models import Event

PAGE_SIZE = 100


def operator_events():
    """Events written on behalf of a person (``user:<name>``) or the CLI (``cli``)."""
    return Event.objects.filter(Q(actor__startswith="user:") | Q(actor="cli"))


@console_view
def audit(request):
    """Newest first, paginated; the table alone for htmx filter requests."""
    queryset = operator_events().select_related("run", "step").order_by("-created_at", "-pk")
    audit_filter = AuditFilter(request.GET or None, queryset=queryset)
    page = Paginator(audit_filter.qs, PAGE_SIZE).get_page(request.GET.get("page"))
    return render_page(
        request,
        "console/audit.html",
        "partials/audit_rows.html",
        {"filter": audit_filter, "page": page, "events": page.object_list},
    )
