"""Replay on the console: one finished run (preview, then confirm) and every run the
runs list's current filter matches (confirmation page with the count and a sample).

Both need ``runs.operate_run`` (403 otherwise, GET included: a viewer is never shown
what a replay would do to the outside world) and call the engine
(``runs.engine.control.replay``) with the actor ``user:<username>``.
"""

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from runs.console.access import OPERATE_PERM, actor_of, console_view, refusal
from runs.console.actions import control_refusal
from runs.console.filters import RunFilter
from runs.console.forms import InvalidInput, posted_text
from runs.engine.service import (
    BULK_LIMIT,
    DEFAULT_RATE,
    ControlError,
    bulk_candidates,
    bulk_replay,
    check_rate,
    checkpoint_labels,
    db_now,
    number_from_text,
    plan_replay,
    replay_run,
    replayable_checkpoints,
)
from runs.models import Run
from runs.states import RUN_TERMINAL, RunStatus

#: Runs shown on the bulk confirmation page.
SAMPLE_SIZE = 10
#: What "Replay N matching runs" takes when the filter names no state.
DEFAULT_BULK_STATES = (RunStatus.FAILED, RunStatus.CANCELLED)


def _operator(request) -> None:
    if not request.user.has_perm(OPERATE_PERM):
        raise PermissionDenied("replaying runs needs runs.operate_run")


def _checked(request) -> bool:
    return request.POST.get("reexecute") == "on" or request.GET.get("reexecute") == "on"


@console_view
def replay_preview(request, run_id):
    """GET: what replaying the run from ``checkpoint`` (default: before its failed
    step) would run, reuse and repeat, with the confirm form. POST: confirm."""
    _operator(request)
    run = get_object_or_404(Run.objects.select_related("thread"), pk=run_id)
    if request.method == "POST":
        return _replay_confirm(request, run)
    chosen = request.GET.get("checkpoint") or None
    reexecute = _checked(request)
    context: dict[str, Any] = {"run": run, "plan": None, "error": "", "reexecute": reexecute}
    try:
        plan = plan_replay(run, chosen, reexecute=reexecute)
        candidates = list(reversed(replayable_checkpoints(run)))
        # Names as the run page shows them: ``after:think#7`` where a loop saved a name
        # more than once, so the choice names exactly one checkpoint.
        labels = checkpoint_labels(run, candidates)
        context.update(
            plan=plan,
            checkpoints=list(dict.fromkeys(labels[c.pk] for c in candidates)),
            chosen=labels.get(plan.checkpoint.pk, plan.checkpoint.name),
        )
    except ControlError as exc:
        context["error"] = f"{exc.message} [{exc.code}]"
    return render(
        request, "console/replay_preview.html", context, status=409 if context["error"] else 200
    )


def _replay_confirm(request, run: Run):
    back = reverse("console:replay", args=[run.pk])
    try:
        new = replay_run(
            run,
            actor=actor_of(request),
            reason=posted_text(request.POST, "reason"),
            checkpoint=request.POST.get("checkpoint") or None,
            reexecute=_checked(request),
            again=request.POST.get("again") == "on",
        )
    except InvalidInput as exc:
        return refusal(
            request, title="Invalid input", message=str(exc), status=400, back=back, code=exc.code
        )
    except ControlError as exc:
        return control_refusal(request, exc, back=back)
    messages.success(request, f"Run {run.pk} replayed as {new.pk} from {new.replay_checkpoint}.")
    return redirect(reverse("console:run", args=[new.pk]))


def bulk_selection(query: QueryDict):
    """The runs "Replay N matching runs" takes for the runs list filter ``query``:
    finished ones in the filter's states (FAILED and CANCELLED when it names none),
    not replayed already, oldest first."""
    matching = RunFilter(query or None, queryset=Run.objects.all(), now=db_now()).qs
    named = query.getlist("status")
    states = [s for s in named if s in RUN_TERMINAL]
    if named and not states:
        return Run.objects.none()
    return bulk_candidates(status=states or DEFAULT_BULK_STATES, queryset=matching)


def _filter_query(request) -> QueryDict:
    source = request.POST.get("filter", "") if request.method == "POST" else request.GET.urlencode()
    query = QueryDict(source, mutable=True)
    for key in ("page", "o"):
        query.pop(key, None)
    return query


@console_view
def bulk_replay_view(request):
    """GET: the confirmation page: how many runs the current filter's replay takes, a
    sample, the rate and the reason. POST: replay them, if the selection still has the
    count that was confirmed (409 otherwise)."""
    _operator(request)
    query = _filter_query(request)
    selection = bulk_selection(query)
    count = selection.count()
    back = reverse("console:runs") + (f"?{query.urlencode()}" if query else "")
    if request.method != "POST":
        return render(
            request,
            "console/replay_bulk_confirm.html",
            {
                "count": count,
                "sample": list(selection.select_related("thread")[:SAMPLE_SIZE]),
                "filter_query": query.urlencode(),
                "rate": DEFAULT_RATE,
                "limit": BULK_LIMIT,
                "back": back,
            },
        )
    if str(count) != request.POST.get("count", "").strip():
        return refusal(
            request,
            title="The selection changed, review it again",
            message=f"{count} runs match now; the page you confirmed showed "
            f"{request.POST.get('count') or '?'}. Nothing was replayed.",
            back=reverse("console:bulk_replay") + (f"?{query.urlencode()}" if query else ""),
        )
    try:
        reason = posted_text(request.POST, "reason")
        rate = check_rate(number_from_text(request.POST.get("rate") or DEFAULT_RATE))
        result = bulk_replay(
            selection,
            actor=actor_of(request),
            reason=reason,
            rate=rate,
            reexecute=_checked(request),
        )
    except InvalidInput as exc:
        return refusal(
            request, title="Invalid input", message=str(exc), status=400, back=back, code=exc.code
        )
    except ControlError as exc:
        return control_refusal(request, exc, back=back)
    return render(request, "console/replay_bulk_done.html", {"result": result, "back": back})


def replay_all_link(request) -> dict:
    """For the runs list: ``{"count": N, "url": ...}`` of "Replay N matching runs", or
    ``{}`` for a user who may not replay."""
    if not request.user.has_perm(OPERATE_PERM):
        return {}
    query = _filter_query(request)
    return {
        "count": bulk_selection(query).count(),
        "url": reverse("console:bulk_replay") + (f"?{query.urlencode()}" if query else ""),
    }
