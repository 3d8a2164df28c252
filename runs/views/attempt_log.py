"""One attempt's log on the console: what the step's code logged and printed during that
attempt (the newest ``AGENTOPS_ATTEMPT_LOG_BYTES`` of it), escaped as untrusted text."""

from django.shortcuts import get_object_or_404

from runs.console.access import console_view, render_page
from runs.models import AttemptLog, Step


@console_view
def attempt_log(request, run_id, step_id, attempt):
    """The page (or, for htmx, the ``<pre>`` fragment) of ``attempt`` of ``step_id``;
    404 for another run's step. An attempt without a stored log (still running, or its
    worker died) says so."""
    step = get_object_or_404(Step.objects.select_related("run"), pk=step_id, run_id=run_id)
    log = AttemptLog.objects.filter(step=step, attempt=attempt).first()
    context = {"run": step.run, "step": step, "attempt": attempt, "log": log}
    return render_page(request, "console/attempt_log.html", "partials/attempt_log.html", context)
