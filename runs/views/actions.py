"""Operator actions on runs: cancel, re-dispatch, retry a step, resume from a checkpoint
(preview, then confirm), bulk cancel / re-dispatch (confirmation page first).

Each is a plain POST form (CSRF), gated by ``runs.operate_run`` (403), re-checks the run's
version at submit time, and calls exactly one engine function with the actor
``user:<username>``; the engine writes the event.
"""

import json

from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from runs.console.access import (
    OPERATE_PERM,
    actor_of,
    console_action,
    console_view,
    refusal,
    stale_run,
)
from runs.console.actions import back_url, control_refusal, perform
from runs.console.forms import InvalidInput, optional_json, posted_text, required_text
from runs.engine import service as engine
from runs.engine.service import (
    IDS,
    ControlError,
    amount_from_text,
    parse_id,
    pause_progress,
    plan_resume,
    raise_budget,
    request_cancel,
    require_reason,
    resumable_names,
    resume_from_checkpoint,
    retry_step,
    unknown_id_message,
)
from runs.models import Run
from runs.states import RUN_TERMINAL, RunStatus, command_allows, command_states

#: Most runs one bulk action may touch.
BULK_LIMIT = 500


def _run_for_action(request, run_id):
    run = get_object_or_404(Run, pk=run_id)
    back = back_url(request, reverse("console:run", args=[run.pk]))
    return run, back, stale_run(request, run, request.POST.get("run_version"), back)


def _act_on_run(request, run_id, call, success):
    """Perform ``call(run, actor)`` on the run ``run_id`` as the person (``perform``: the
    ``success(result)`` notice, or the refusal page for what ``call`` or the engine
    refused), unless the run changed since the form was shown (``stale_run``: 409)."""
    run, back, changed = _run_for_action(request, run_id)
    if changed:
        return changed
    return perform(request, lambda: call(run, actor_of(request)), back=back, success=success)


def _reason(request) -> str:
    return posted_text(request.POST, "reason")


@console_action(OPERATE_PERM)
def cancel(request, run_id):
    """Ask the run to cancel (``runs.engine.control.cancel.request_cancel``); reason required."""
    return _act_on_run(
        request,
        run_id,
        lambda run, actor: request_cancel(run, actor=actor, reason=_reason(request)),
        lambda r: f"Cancel requested for run {r.pk} (now {r.status}).",
    )


@console_action(OPERATE_PERM)
def redispatch(request, run_id):
    """Re-notify the run's open step (``redispatch``), never taking a live lease."""
    return _act_on_run(
        request,
        run_id,
        lambda run, actor: engine.redispatch(run, actor=actor, wait_seconds=0),
        lambda s: f"Re-dispatched step {s.name} of run {s.run_id}.",
    )


@console_action(OPERATE_PERM)
def retry(request, run_id):
    """Re-queue the failed or unknown step of a PAUSED run (``retry_step``)."""
    return _act_on_run(
        request,
        run_id,
        lambda run, actor: retry_step(
            run,
            actor=actor,
            reason=_reason(request),
            against_verify=request.POST.get("against_verify") == "on",
        ),
        lambda s: f"Step {s.name} of run {s.run_id} queued again.",
    )


@console_action(OPERATE_PERM)
def budget(request, run_id):
    """Raise the run's budget limits (``runs.engine.effects.budget.raise_budget``); a run paused
    for an exhausted budget then resumes its paused step."""
    post = request.POST
    return _act_on_run(
        request,
        run_id,
        lambda run, actor: raise_budget(
            run,
            actor=actor,
            reason=_reason(request),
            # Form fields are text: each becomes the number it spells.
            add_model_calls=amount_from_text("model_calls", post.get("add_model_calls", "")),
            add_tool_calls=amount_from_text("tool_calls", post.get("add_tool_calls", "")),
            add_cost_usd=amount_from_text("cost_usd", post.get("add_cost_usd", "")),
            add_tokens=amount_from_text("tokens", post.get("add_tokens", "")),
        ),
        lambda r: f"Budget of run {r.pk} raised (now {r.status}).",
    )


@console_view
def resume_preview(request, run_id):
    """One form: what resuming from ``checkpoint`` (with an optional input patch, and
    re-executing recorded side effects or not) would re-run and which side effects it
    could repeat, and the confirmation. GET (a link's ``?checkpoint=``) and POST with
    ``preview`` show the plan (htmx refreshes it inline as the form changes); a POST
    without it resumes with exactly the values posted, provided they are the ones the
    plan shown was made for (``previewed``), else the plan is shown again for them."""
    if not request.user.has_perm(OPERATE_PERM):
        raise PermissionDenied("resuming needs runs.operate_run")
    data = request.POST if request.method == "POST" else request.GET
    if request.method == "POST" and not data.get("preview"):
        return _resume_confirm(request, run_id)
    return _resume_plan(request, run_id, data)


def _resume_values(data) -> tuple[str, str, bool]:
    return (
        (data.get("checkpoint") or "").strip(),
        data.get("input_patch", ""),
        data.get("reexecute") == "on",
    )


def _previewed(checkpoint: str, patch, reexecute: bool) -> str:
    """What a plan was made for, as the form carries it back to confirm."""
    return json.dumps([checkpoint, patch, reexecute], sort_keys=True)


def _resume_plan(request, run_id, data, notice: str = ""):
    run = get_object_or_404(Run.objects.select_related("thread"), pk=run_id)
    checkpoint, patch_text, reexecute = _resume_values(data)
    context = {
        "run": run,
        "checkpoint": checkpoint,
        "patch_text": patch_text,
        "reexecute": reexecute,
        "reason": data.get("reason", ""),
        "notice": notice,
        "checkpoints": _checkpoint_choices(run, checkpoint),
        "plan": None,
        "error": "",
        "previewed": "",
    }
    try:
        patch = optional_json(data, "input_patch", label="The input patch", must_be_object=True)
        context["plan"] = plan_resume(run, checkpoint, patch, reexecute=reexecute)
        context["previewed"] = _previewed(checkpoint, patch, reexecute)
    except InvalidInput as exc:
        context["error"] = f"{exc} [{exc.code}]"
    except ControlError as exc:
        context["error"] = f"{exc.message} [{exc.code}]"
    return render(
        request, "console/resume_preview.html", context, status=400 if context["error"] else 200
    )


def _resume_confirm(request, run_id):
    checkpoint, _, reexecute = _resume_values(request.POST)
    try:
        patch = optional_json(
            request.POST, "input_patch", label="The input patch", must_be_object=True
        )
    except InvalidInput:
        return _resume_plan(request, run_id, request.POST)
    if request.POST.get("previewed") != _previewed(checkpoint, patch, reexecute):
        # Confirming what was not previewed: show the plan for what is posted, keep it all.
        return _resume_plan(
            request,
            run_id,
            request.POST,
            notice="The checkpoint, input patch or re-execution changed since the plan "
            "shown: here is the plan for them. Nothing was done yet; confirm again.",
        )
    run, back, changed = _run_for_action(request, run_id)
    if changed:
        return changed

    def call():
        required_text(request.POST, "checkpoint", "A checkpoint")
        reason = _reason(request)
        return resume_from_checkpoint(
            run,
            checkpoint,
            actor=actor_of(request),
            input_patch=patch,
            reason=reason,
            reexecute=reexecute,
        )

    return perform(
        request,
        call,
        back=reverse("console:run", args=[run.pk]),
        success=_resumed_message,
    )


def _resumed_message(run) -> str:
    """What the resume page says after a confirmed resume: made, or (steps ran) made
    once they stopped."""
    waiting = pause_progress(run)
    if waiting:
        return f"Run {run.pk}: resume requested; {waiting}."
    return f"Run {run.pk} resumed (generation {run.generation})."


# -- bulk ------------------------------------------------------------------------------

BULK_ACTIONS = {
    "cancel": "Cancel",
    "redispatch": "Re-dispatch",
}


def bulk_skip_reason(action: str, run: Run) -> str:
    """Why ``action`` (a key of ``runs.states.RUN_COMMANDS``) does not apply to ``run``
    in its state, or ``""`` if it does."""
    if run.status in RUN_TERMINAL:
        return f"already {run.status}"
    if command_allows(action, run.status):
        return ""
    if run.status == RunStatus.CANCEL_REQUESTED:
        return "cancel already requested"
    return (
        f"{run.status}: {BULK_ACTIONS[action].lower()} applies to "
        f"{command_states(action)} runs (resolve or decide it instead)"
    )


def _apply_one(request, action: str, run: Run, reason: str):
    if action == "cancel":
        return request_cancel(run, actor=actor_of(request), reason=reason)
    return engine.redispatch(run, actor=actor_of(request), wait_seconds=0)


@console_action(OPERATE_PERM)
def bulk(request):
    """Step 1 (no ``confirm``): the confirmation page listing exactly the runs that will
    change, and those skipped with why. Step 2 (``confirm``): apply to each listed run
    whose version is still the one confirmed; report what changed and what was skipped."""
    action = request.POST.get("action", "")
    if action not in BULK_ACTIONS:
        return refusal(
            request,
            title="Unknown action",
            message=f"no bulk action {action!r}",
            status=400,
            back=reverse("console:runs"),
        )
    texts = request.POST.getlist("run")[:BULK_LIMIT]
    ids = {text: parse_id(text, "run") for text in texts}
    runs = list(
        Run.objects.filter(pk__in=[i for i in ids.values() if i is not None]).order_by(
            "-created_at", "-pk"
        )
    )
    found = {run.pk for run in runs}
    missing = next((text for text, pk in ids.items() if pk not in found), None)
    if missing is not None:
        # An ill-formed id names no run either: the selection is refused whole.
        return refusal(
            request,
            title="Not found",
            message=f"{unknown_id_message(missing, 'run')}. Nothing was done.",
            status=404,
            code=IDS["run"].code,
            back=reverse("console:runs"),
        )
    context = {"action": action, "label": BULK_ACTIONS[action], "limit": BULK_LIMIT}
    if not request.POST.get("confirm"):
        context["apply"] = [r for r in runs if not bulk_skip_reason(action, r)]
        context["skip"] = [
            (r, bulk_skip_reason(action, r)) for r in runs if bulk_skip_reason(action, r)
        ]
        return render(request, "console/bulk_confirm.html", context)
    reason = posted_text(request.POST, "reason")
    if action == "cancel":
        try:
            require_reason(reason, "cancel")
        except ControlError as exc:
            return control_refusal(request, exc, back=reverse("console:runs"))
    done, skipped = [], []
    for run in runs:
        confirmed = request.POST.get(f"version_{run.pk}")
        why = bulk_skip_reason(action, run)
        if str(run.version) != (confirmed or "").strip():
            skipped.append((run, f"changed since the confirmation (now {run.status})"))
        elif why:
            skipped.append((run, why))
        else:
            try:
                _apply_one(request, action, run, reason)
                run.refresh_from_db()
                done.append(run)
            except ControlError as exc:
                skipped.append((run, f"{exc.message} [{exc.code}]"))
    context.update({"done": done, "skipped": skipped})
    return render(request, "console/bulk_done.html", context)


def _checkpoint_choices(run: Run, chosen: str) -> list[str]:
    """The resumable checkpoints of ``run`` in run order; a ``chosen`` name that is not
    among them (``after:think`` of a loop, shown as ``after:think#7``) comes first."""
    names = resumable_names(run)
    return names if not chosen or chosen in names else [chosen, *names]
