"""The workers page: worker processes (``WorkerProcess``) and the steps each holds, and
the picture of their steps per minute (``runs.console.charts.workers_chart``)."""

from runs.console.access import console_view, render_page
from runs.console.charts import workers_chart
from runs.console.workforce import workforce


@console_view
def workers(request):
    """Live workers with heartbeat age and held steps; dead ones that never recorded a
    stop, with what they still hold; recently stopped ones;
    the throughput picture on the full page (htmx polls refresh the rows only)."""
    team = workforce()
    context = {"live": team.live, "dead": team.dead, "stopped": team.stopped, "now": team.now}
    if not request.htmx:
        context["chart"] = workers_chart(team.now)
    return render_page(request, "console/workers.html", "partials/worker_rows.html", context)
