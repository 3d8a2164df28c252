"""The runs list: django-filter filters, sorting, pagination, and bulk cancel /
re-dispatch with a confirmation step."""

from runs.console.access import console_view, render_page
from runs.console.filters import RunFilter, unknown_step_exists
from runs.console.paging import paginate
from runs.engine.service import db_now
from runs.models import Run
from runs.views.replay import replay_all_link


@console_view
def runs_list(request):
    """Filtered, sorted (``o``), paginated (``page``) runs; the table alone for htmx."""
    queryset = (
        Run.objects.select_related("thread", "owner", "current_step")
        .annotate(has_unknown=unknown_step_exists())
        .order_by("-created_at", "-pk")
    )
    run_filter = RunFilter(request.GET or None, queryset=queryset, now=db_now())
    page = paginate(request, run_filter.qs)
    return render_page(
        request,
        "console/runs.html",
        "partials/run_table.html",
        {
            "filter": run_filter,
            "page": page,
            "runs": page.object_list,
            "replay_all": replay_all_link(request),
        },
    )
