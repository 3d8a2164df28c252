"""Unknown outcomes: each UNKNOWN step with its operation, a "check the outside world
now" button (``runs.engine.effects.unknown_outcomes.verify_now``) and the resolutions
(done with evidence, not done, or cancel the run)."""

import json

from django.shortcuts import get_object_or_404
from django.urls import reverse

from approvals.desk import verify_answers
from runs.console.access import (
    OPERATE_PERM,
    actor_of,
    console_action,
    console_view,
    refusal,
    render_page,
    stale_run,
)
from runs.console.actions import control_refusal, perform
from runs.console.filters import UnknownFilter
from runs.console.forms import InvalidInput, optional_json, posted_text
from runs.console.paging import paginate
from runs.engine.service import (
    OUTCOMES,
    ControlError,
    resolve_unknown,
    verify_now,
)
from runs.models import Event, Operation, Step
from runs.states import StepStatus
from runs.stats import NON_TERMINAL_STATES


def unknown_steps():
    """Every UNKNOWN step of a live run, oldest first (the list's queryset)."""
    return (
        Step.objects.filter(status=StepStatus.UNKNOWN, run__status__in=NON_TERMINAL_STATES)
        .select_related("run", "run__thread")
        .order_by("created_at", "pk")
    )


def unknown_rows(steps: list[Step]) -> list[dict]:
    """``[{step, run, operation, worker, verify}]`` for ``steps`` (``verify``: the latest
    verify answer a resolution could go against); three queries whatever the count."""
    ids = [s.pk for s in steps]
    operations: dict[int, Operation] = {}
    for op in Operation.objects.filter(step_id__in=ids).order_by("pk"):
        if op.step_id is None:  # the filter keeps step operations only; typed Optional
            continue
        if (
            op.status in (Operation.Status.INTENT, Operation.Status.UNKNOWN)
            or op.step_id not in operations
        ):
            operations[op.step_id] = op
    workers: dict[int, str] = {}
    for step_id, payload, actor in (
        Event.objects.filter(step_id__in=ids, type="step.started")
        .order_by("seq")
        .values_list("step_id", "payload", "actor")
    ):
        workers[step_id] = str((payload or {}).get("worker") or actor)
    answers = verify_answers(steps)
    return [
        {
            "step": s,
            "run": s.run,
            "operation": operations.get(s.pk),
            "worker": s.owner or workers.get(s.pk, ""),
            "verify": answers.get(s.pk),
        }
        for s in steps
    ]


@console_view
def unknowns(request):
    """The list of unknown outcomes, filtered like the runs list and paged."""
    unknown_filter = UnknownFilter(request.GET or None, queryset=unknown_steps())
    page = paginate(request, unknown_filter.qs)
    return render_page(
        request,
        "console/unknowns.html",
        "partials/unknown_rows.html",
        {
            "filter": unknown_filter,
            "page": page,
            "rows": unknown_rows(list(page.object_list)),
            "outcomes": OUTCOMES,
        },
    )


def _unknown_step(step_id) -> Step:
    return get_object_or_404(Step.objects.select_related("run"), pk=step_id)


@console_action(OPERATE_PERM)
def verify(request, step_id):
    """Ask the tool's ``verify`` hook about the outside world now; show its answer."""
    step = _unknown_step(step_id)
    back = reverse("console:unknowns") + f"#step-{step.pk}"
    if step.status != StepStatus.UNKNOWN:
        return refusal(
            request,
            title="This run changed, reload",
            message=f"step {step.name} is {step.status} now, not UNKNOWN",
            back=back,
            code="step_not_unknown",
        )
    try:
        answer = verify_now(step, actor=actor_of(request))
    except ControlError as exc:
        return control_refusal(request, exc, back=back)
    result_text = "" if answer.result is None else json.dumps(answer.result, sort_keys=True)
    return render_page(
        request,
        "console/verify_answer.html",
        "partials/verify_answer.html",
        {
            "step": step,
            "run": step.run,
            "answer": answer,
            "back": back,
            "result_text": result_text,
            "verify": verify_answers([step]).get(step.pk),
        },
    )


@console_action(OPERATE_PERM)
def resolve(request, step_id):
    """Resolve: ``done`` (evidence, optional JSON result) or ``not-done`` (execute it);
    ``against_verify`` confirms going against the latest verify answer."""
    step = _unknown_step(step_id)
    back = reverse("console:unknowns")
    changed = stale_run(request, step.run, request.POST.get("run_version"), back)
    if changed:
        return changed

    def call():
        outcome = request.POST.get("outcome", "")
        if outcome not in OUTCOMES:
            raise InvalidInput("Choose an outcome: done or not-done.")
        evidence = posted_text(request.POST, "evidence")
        result = optional_json(request.POST, "result", label="The result")
        return resolve_unknown(
            step.run,
            step.name,
            outcome=outcome,
            evidence=evidence,
            actor=actor_of(request),
            result=result,
            against_verify=request.POST.get("against_verify") == "on",
        )

    return perform(
        request,
        call,
        back=reverse("console:run", args=[step.run_id]),
        success=lambda r: f"Step {step.name} resolved; run {r.pk} is {r.status}.",
    )
