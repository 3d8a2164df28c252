"""The overview page: the figures of ``runs.stats.overview_stats``, refreshed by htmx
polling of the same view (fragment ``partials/overview_stats.html``), the pictures of
the last 6 hours (``runs.console.charts.overview_charts``), and the storage panel, which
htmx loads by itself (``overview_storage``): counting storage scans every stored row,
and the figures must not wait for it."""

from runs.console.access import console_view, render_page
from runs.console.charts import overview_charts
from runs.engine.service import db_now
from runs.stats import overview_stats
from runs.storage_stats import storage_by_workflow


@console_view
def overview(request):
    """Full page with the pictures, or the figures fragment when htmx polls."""
    if request.htmx:
        return render_page(
            request,
            "console/overview.html",
            "partials/overview_stats.html",
            {"stats": overview_stats(storage=False)},
        )
    now = db_now()
    return render_page(
        request,
        "console/overview.html",
        "partials/overview_stats.html",
        {"stats": overview_stats(now, storage=False), "charts": overview_charts(now)},
    )


@console_view
def overview_storage(request):
    """The storage panel of the overview: bytes per workflow (``storage_by_workflow``,
    cached for a minute), a fragment for htmx or a page of its own."""
    return render_page(
        request,
        "console/overview_storage.html",
        "partials/overview_storage.html",
        {"storage": storage_by_workflow()},
    )
