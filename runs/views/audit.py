"""The audit log: every operator action (events whose actor is a person or the CLI),
filterable by user, action and run, and below it the refused actions (403/409 from the
console or the API, ``runs.refusals``)."""

from django.db.models import Q

from runs.console.access import console_view, render_page
from runs.console.filters import AuditFilter
from runs.console.paging import paginate
from runs.models import Event, RefusedAction

PAGE_SIZE = 100
#: Newest refused actions shown under the log.
REFUSALS_SHOWN = 50


def operator_events():
    """Events written on behalf of a person (``user:<name>``) or the CLI (``cli``)."""
    return Event.objects.filter(Q(actor__startswith="user:") | Q(actor="cli"))


@console_view
def audit(request):
    """Newest first, paginated; the table alone for htmx filter requests."""
    queryset = operator_events().select_related("run", "step").order_by("-created_at", "-pk")
    audit_filter = AuditFilter(request.GET or None, queryset=queryset)
    page = paginate(request, audit_filter.qs, per_page=PAGE_SIZE)
    return render_page(
        request,
        "console/audit.html",
        "partials/audit_rows.html",
        {
            "filter": audit_filter,
            "page": page,
            "events": page.object_list,
            "refusals": refused_actions(request.GET.get("user", ""), request.GET.get("run", "")),
        },
    )


def refused_actions(user: str = "", run: str = "") -> list[RefusedAction]:
    """The newest refused actions, of one person (username or actor) and/or whose target
    names a run id starting with ``run``."""
    rows = RefusedAction.objects.order_by("-created_at", "-pk")
    user, run = user.strip(), run.strip().lower()
    if user:
        rows = rows.filter(actor=user if ":" in user else f"user:{user}")
    if run:
        rows = rows.filter(target__contains=f"run:{run}")
    return list(rows[:REFUSALS_SHOWN])
