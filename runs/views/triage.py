"""The triage inbox page (see ``runs.console.triage``)."""

from runs.console.access import console_view, render_page
from runs.console.triage import triage_groups
from runs.engine.service import db_now


@console_view
def triage(request):
    """Every group of things that need a human; the list polls itself through htmx."""
    groups = triage_groups(db_now())
    return render_page(
        request,
        "console/triage.html",
        "partials/triage_groups.html",
        {"groups": groups, "total": sum(g.total for g in groups)},
    )
