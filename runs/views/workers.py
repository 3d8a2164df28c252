"""The workers page: worker processes (``WorkerProcess``) and the steps each holds."""

from runs.console.access import console_view, render_page
from runs.console.workforce import workforce


@console_view
def workers(request):
    """Live workers (not stopped) with heartbeat age and held steps; recently stopped ones."""
    team = workforce()
    return render_page(
        request,
        "console/workers.html",
        "partials/worker_rows.html",
        {"live": team.live, "stopped": team.stopped, "now": team.now},
    )
