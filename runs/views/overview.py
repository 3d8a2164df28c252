"""The overview page: the figures of ``runs.stats.overview_stats``, refreshed by htmx
polling of the same view (fragment ``partials/overview_stats.html``)."""

from runs.console.access import console_view, render_page
from runs.stats import overview_stats


@console_view
def overview(request):
    """Full page, or the figures fragment when htmx polls."""
    return render_page(
        request,
        "console/overview.html",
        "partials/overview_stats.html",
        {"stats": overview_stats()},
    )
