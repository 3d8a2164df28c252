"""The overview page: the figures of ``runs.stats.overview_stats``, refreshed by htmx
polling of the same view (fragment ``partials/overview_stats.html``), and the pictures
of the last 6 hours (``runs.console.charts.overview_charts``)."""

from runs.console.access import console_view, render_page
from runs.console.charts import overview_charts
from runs.engine.state.clock import db_now
from runs.stats import overview_stats


@console_view
def overview(request):
    """Full page with the pictures, or the figures fragment when htmx polls."""
    if request.htmx:
        return render_page(
            request,
            "console/overview.html",
            "partials/overview_stats.html",
            {"stats": overview_stats()},
        )
    now = db_now()
    return render_page(
        request,
        "console/overview.html",
        "partials/overview_stats.html",
        {"stats": overview_stats(now), "charts": overview_charts(now)},
    )
