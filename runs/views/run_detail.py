"""The run detail page: header, steps with every attempt, live event timeline,
messages, artifacts, checkpoints and the operation ledger; plus the full event list and
artifact downloads."""

from django.core.exceptions import PermissionDenied
from django.db.models import F
from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404, render
from django_htmx.http import HttpResponseClientRefresh

from approvals.desk import verify_answers
from approvals.tool_calls import mark_edited_calls
from runs.console import artifacts as artifact_files
from runs.console.access import DOWNLOAD_PERM, console_view, refusal, render_page
from runs.console.attempts import step_histories
from runs.console.branches import fan_outs
from runs.console.charts import run_timeline
from runs.console.conversation import chat
from runs.console.forms import InvalidInput
from runs.console.sections import section
from runs.engine.service import (
    cancel_progress,
    checkpoint_labels,
    db_now,
    open_step,
    pause_progress,
    waiting_on,
)
from runs.models import (
    Artifact,
    Checkpoint,
    Event,
    Message,
    Operation,
    Run,
    Step,
    Takeover,
)
from runs.states import RUN_TERMINAL, RunStatus, StepStatus
from runs.views.waits import signal_form

#: Events per chunk of the run's event list (newest first; "load more" asks for the next).
EVENTS_CHUNK = 50
#: Most new events one live refresh adds at the top of the list.
EVENTS_LIVE_LIMIT = 500
#: Rows per page of each section of the run page (steps, messages, checkpoints, ...).
SECTION_SIZE = 50
#: Child runs the run page links; the runs list filtered by parent shows them all.
CHILDREN_SHOWN = 20


def retryable_steps(run: Run) -> list[dict]:
    """``[{"step", "verify"}]``: the failed and unknown steps of the run's generation in
    run order, each with the latest verify answer a retry (the call runs again) would go
    against, or ``None``; two queries whatever the count."""
    steps = list(
        Step.objects.filter(
            run=run,
            generation=run.generation,
            status__in=(StepStatus.FAILED, StepStatus.UNKNOWN),
        ).order_by("seq")
    )
    answers = verify_answers(steps)
    return [
        {
            "step": s,
            "verify": answers[s.pk] if answers.get(s.pk, {}).get("against_not_done") else None,
        }
        for s in steps
    ]


def _get_run(run_id) -> Run:
    return get_object_or_404(
        Run.objects.select_related("thread", "owner", "current_step"), pk=run_id
    )


def budget_rows(run: Run) -> list[dict]:
    """``[{name, used, limit, left}]`` for model calls, tool calls, tokens and cost; the
    cost is ``"unknown"`` (never 0) while a model call had no price."""
    rows = []
    for key in ("model_calls", "tool_calls", "tokens", "cost_usd"):
        used = getattr(run, key)
        if key == "cost_usd" and run.unpriced_model_calls:
            rows.append(
                {
                    "name": key,
                    "used": f"unknown ({used} priced + {run.unpriced_model_calls} model "
                    "calls without a price)",
                    "limit": run.budget.get(key) if isinstance(run.budget, dict) else None,
                    "left": "unknown",
                }
            )
            continue
        limit = run.budget.get(key) if isinstance(run.budget, dict) else None
        left = None
        if limit is not None:
            try:
                left = type(used)(str(limit)) - used
            except (ValueError, ArithmeticError):
                left = None
        rows.append({"name": key, "used": used, "limit": limit, "left": left})
    return rows


def live_context(run: Run, request) -> dict:
    """What the live part of the page shows: header, one page of steps (newest first,
    ``?steps=N``) with their attempts, the map steps' branches counted by state, the
    timeline picture."""
    # Outputs are not shown here; deferring them spares loading large payloads.
    steps = section(
        request,
        Step.objects.filter(run=run).defer("output").order_by("-seq"),
        param="steps",
        size=SECTION_SIZE,
    )
    step_events = list(
        Event.objects.filter(run=run, step__in=[s.pk for s in steps.rows]).order_by("seq")
    )
    return {
        "run": run,
        "terminal": run.status in RUN_TERMINAL,
        "histories": step_histories(steps.rows, step_events),
        "fan_outs": fan_outs(run),
        "steps_pager": steps,
        "retryable_steps": retryable_steps(run),
        "budget": budget_rows(run),
        "open_takeover": Takeover.objects.filter(run=run, status=Takeover.Status.OPEN).first(),
        "replays": list(run.replays.order_by("created_at").only("pk", "status")),
        "parent": run.parent_run,
        "parent_step": (
            Step.objects.filter(pk=run.parent_step_id).only("name").first()
            if run.parent_step_id
            else None
        ),
        "children": list(
            run.children.order_by("parent_step__seq", "child_position", "pk").only(
                "pk", "status", "workflow", "child_position", "detached"
            )[:CHILDREN_SHOWN]
        ),
        "children_total": run.children.count(),
        "picture": run_timeline(run, db_now()),
        "cancel_progress": cancel_progress(run) if run.status == RunStatus.CANCEL_REQUESTED else "",
        "pause_progress": pause_progress(run),
        "waiting_on": waiting_on(run, open_step(run)),
        "signal_form": signal_form(run) if run.status == RunStatus.WAITING_EXTERNAL else None,
    }


@console_view
def run_detail(request, run_id):
    """Full page, or the live fragment (header, steps, timeline) when htmx polls; a poll
    that shows an older ``shown_version`` of the run gets a full refresh instead."""
    run = _get_run(run_id)
    context = live_context(run, request)
    if request.htmx:
        shown = request.GET.get("shown_version")
        if shown is not None and shown != str(run.version):
            # The run changed state: reload the whole page so the static parts (messages,
            # artifacts, checkpoints, ledger, action forms) are current too.
            return HttpResponseClientRefresh()
        return render_page(request, "console/run_detail.html", "partials/run_live.html", context)
    artifacts = section(
        request,
        Artifact.objects.filter(run=run).select_related("step").order_by("-pk"),
        param="artifacts",
        size=SECTION_SIZE,
    )
    for artifact in artifacts.rows:
        artifact.verification = artifact_files.verify(artifact)
    checkpoints = section(
        request,
        Checkpoint.objects.filter(run=run).select_related("step").defer("data").order_by("-pk"),
        param="checkpoints",
        size=SECTION_SIZE,
    )
    labels = checkpoint_labels(run, checkpoints.rows)
    for checkpoint in checkpoints.rows:
        checkpoint.label = labels[checkpoint.pk]
    messages = section(
        request,
        Message.objects.filter(thread_id=run.thread_id)
        .exclude(status=Message.Status.SUPERSEDED)
        # Queued messages have no seq until their run starts: they are newest.
        .order_by(F("seq").desc(nulls_first=True), "-pk"),
        param="messages",
        size=SECTION_SIZE,
    )
    mark_edited_calls(messages.rows)
    context.update(
        {
            "messages_section": messages,
            "chat": chat(run.pk, messages.rows),
            "chunk": event_chunk(run),
            "newest": True,
            "live": run.status not in RUN_TERMINAL,
            "artifacts": artifacts,
            "checkpoints": checkpoints,
            "operations": section(
                request,
                Operation.objects.filter(run=run).select_related("step").order_by("-pk"),
                param="operations",
                size=SECTION_SIZE,
            ),
        }
    )
    return render_page(request, "console/run_detail.html", "partials/run_live.html", context)


def event_chunk(run: Run, *, before: int | None = None, after: int | None = None) -> dict:
    """A chunk of ``run``'s events, newest first: ``{"events": [...], "before": seq to
    continue from for older ones (None at the oldest), "top": the newest seq shown or
    known (what a live refresh asks to follow)}``. ``before``: the ``EVENTS_CHUNK``
    newest events older than that seq; ``after``: the events newer than that seq (at
    most ``EVENTS_LIVE_LIMIT``); neither: the newest chunk. One indexed query on
    (run, seq), whatever the run's length."""
    query = Event.objects.filter(run=run).select_related("step").order_by("-seq")
    if after is not None:
        rows = list(query.filter(seq__gt=after)[:EVENTS_LIVE_LIMIT])
        return {"events": rows, "before": None, "top": rows[0].seq if rows else after}
    if before is not None:
        query = query.filter(seq__lt=before)
    rows = list(query[: EVENTS_CHUNK + 1])
    older = rows[EVENTS_CHUNK - 1].seq if len(rows) > EVENTS_CHUNK else None
    rows = rows[:EVENTS_CHUNK]
    top = rows[0].seq if rows and before is None else run.event_seq
    return {"events": rows, "before": older, "top": top}


def _seq_param(request, name: str) -> int | None:
    """The event seq in ``request.GET[name]``, or ``None`` when absent; raises
    ``InvalidInput`` for anything but digits (a stale or hand-edited link)."""
    value = request.GET.get(name)
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 10:
        raise InvalidInput(f"{name} must be an event seq (digits)")
    return int(value)


@console_view
def run_events(request, run_id):
    """The run's events newest first, a chunk at a time: the whole page (``?before=N``
    continues below seq N without JavaScript), or for htmx the rows alone, older ones
    (``?before=N``, the "load more" row) or newer ones (``?after=N``, the live row)."""
    run = _get_run(run_id)
    try:
        before, after = _seq_param(request, "before"), _seq_param(request, "after")
    except InvalidInput as exc:
        return refusal(request, title="Bad event page", message=str(exc), status=400, code=exc.code)
    chunk = event_chunk(run, before=before, after=after)
    context = {
        "run": run,
        "chunk": chunk,
        "live": run.status not in RUN_TERMINAL,
        "newest": before is None,
    }
    if request.htmx:
        name = "partials/event_live.html" if after is not None else "partials/event_chunk.html"
        return render(request, name, context)
    return render(request, "console/run_events.html", context)


@console_view
def artifact_download(request, artifact_id):
    """The artifact's bytes as an attachment (never rendered inline: they are untrusted)."""
    if not request.user.has_perm(DOWNLOAD_PERM):
        raise PermissionDenied("downloading artifacts needs runs.view_artifact")
    artifact = get_object_or_404(Artifact, pk=artifact_id)
    try:
        handle = artifact_files.open_artifact(artifact)
    except OSError as exc:
        raise Http404(str(exc)) from exc
    response = FileResponse(
        handle, as_attachment=True, filename=artifact.name, content_type="application/octet-stream"
    )
    response["X-Content-Type-Options"] = "nosniff"
    # Opened directly anyway (a browser ignoring the attachment): no script, no origin.
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response
