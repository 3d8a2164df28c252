"""Console pages of the approvals app: the approvals inbox and the takeover desk.

Decisions go through ``approvals.services.decide`` (approver role), takeover claims and
resolutions through ``claim_takeover`` / ``resolve_takeover`` (operator role).
"""

from django.shortcuts import get_object_or_404
from django.urls import reverse

from approvals import argument_form
from approvals.desk import attach_entry_points, attach_verify_answers
from approvals.inbox import EditState, attach_cards
from approvals.services import claim_takeover, decide, resolve_takeover
from approvals.tool_calls import argument_errors, edited_calls, tool_facts
from runs.console import artifacts as artifact_files
from runs.console.access import (
    DECIDE_PERM,
    OPERATE_PERM,
    actor_of,
    console_action,
    console_view,
    refusal,
    render_page,
    stale_run,
)
from runs.console.actions import perform
from runs.console.filters import ApprovalFilter, TakeoverFilter
from runs.console.forms import InvalidInput, optional_json, posted_text
from runs.console.paging import paginate
from runs.engine.service import with_shown_status
from runs.models import Approval, Artifact, Takeover

#: Artifacts previewed per approval.
PREVIEWS_PER_APPROVAL = 3
DECISIONS = ("approve", "reject")
RESOLUTIONS = ("resume", "retry", "mark_done", "cancel")


def _referenced_artifact_ids(evidence) -> set[int]:
    """Artifact ids named in an evidence dict (keys containing ``artifact``)."""
    found: set[int] = set()
    if not isinstance(evidence, dict):
        return found
    for key, value in evidence.items():
        if "artifact" not in key:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                item = item.get("id")
            if isinstance(item, int):
                found.add(item)
    return found


def _attach_previews(approvals: list[Approval]) -> None:
    """Give each approval ``previews``: ``[(artifact, escaped-later text)]`` of the
    artifacts its evidence names (or, if it names none, its run's first artifacts)."""
    by_run: dict = {}
    for artifact in Artifact.objects.filter(run_id__in={a.run_id for a in approvals}).order_by(
        "pk"
    ):
        by_run.setdefault(artifact.run_id, []).append(artifact)
    for approval in approvals:
        candidates = by_run.get(approval.run_id, [])
        wanted = _referenced_artifact_ids(approval.evidence)
        chosen = [a for a in candidates if a.pk in wanted] if wanted else candidates
        # A view-only attribute the template reads.
        approval.previews = [  # type: ignore[attr-defined]
            (a, artifact_files.preview(a)) for a in chosen[:PREVIEWS_PER_APPROVAL]
        ]


def _inbox_context(request, pending, edits=None, status_filter=None) -> dict:
    attach_cards(list(pending.object_list) if hasattr(pending, "object_list") else pending, edits)
    return {"filter": status_filter, "pending": pending, "decisions": DECISIONS}


@console_view
def approvals_inbox(request):
    """Pending approvals (oldest first, filtered like the runs list, paged), each with
    evidence previews and, for an agent's tool call, the conversation up to the call,
    the tool's description and its arguments as a form; decided ones below, newest
    first, paged on their own, edited arguments marked."""
    approval_filter = ApprovalFilter(
        request.GET or None,
        queryset=with_shown_status(Approval.objects.filter(status=Approval.Status.PENDING))
        .select_related("run", "step")
        .order_by("created_at", "pk"),
    )
    pending = paginate(request, approval_filter.qs)
    _attach_previews(list(pending.object_list))
    context = _inbox_context(request, pending, status_filter=approval_filter)
    context["decided"] = _decided(request)
    return render_page(request, "console/approvals.html", "partials/approval_rows.html", context)


def _decided(request):
    """The decided approvals' page, each with ``edit`` (``{"from", "to", "by"}``) when
    the approver let the call run with other arguments."""
    decided = paginate(
        request,
        Approval.objects.exclude(status=Approval.Status.PENDING)
        .select_related("run", "decided_by")
        .order_by("-decided_at", "-pk"),
        param="decided_page",
    )
    rows = list(decided.object_list)
    edits = edited_calls(*{a.run_id for a in rows}) if rows else {}
    for approval in rows:
        evidence = approval.evidence if isinstance(approval.evidence, dict) else {}
        call_id = str(evidence.get("tool_call_id", ""))
        approved = approval.status == Approval.Status.APPROVED
        approval.edit = edits.get(call_id) if approved else None
    return decided


def _answer_in_place(request, approval: Approval, edit: EditState, status: int):
    """The approval's card alone on the inbox page, showing what was posted: the
    tool's field errors (``status`` 400) or the diff to confirm (200)."""
    _attach_previews([approval])
    context = _inbox_context(request, [approval], {approval.pk: edit})
    context["answering"] = approval
    return render_page(
        request, "console/approvals.html", "partials/approval_rows.html", context, status=status
    )


def _posted_edit(request, approval: Approval, decision: str) -> EditState:
    """The posted decision's terms as an ``EditState`` (arguments parsed from the form
    or the raw JSON; ``error`` when they do not parse)."""
    facts = tool_facts(approval)
    edit = EditState(
        mode="json" if request.POST.get("edit_mode", "json") != "form" else "form",
        raw=request.POST.get("arguments", "") if request.POST.get("edit_mode") == "json" else "",
        comment=(request.POST.get("comment") or "").strip(),
        message=(request.POST.get("message") or "").strip(),
    )
    try:
        edit.arguments = argument_form.posted_arguments(
            request.POST, facts["schema"], facts["arguments"]
        )
    except InvalidInput as exc:
        edit.error = str(exc)
        return edit
    if decision != "approve" or edit.arguments == facts["arguments"]:
        return edit
    if edit.arguments is not None:
        edit.errors = argument_errors(approval, edit.arguments)
        if not edit.errors:
            edit.diff = argument_form.diff(facts["arguments"], edit.arguments)
    return edit


@console_action(DECIDE_PERM)
def decide_view(request, approval_id):
    """Approve or reject with a comment (``approvals.services.decide``). On an agent's
    tool call: approve with edited arguments (from the generated form or the raw JSON)
    only after the diff was shown and confirmed (``confirm_arguments`` carries the
    arguments confirmed); an edit the tool's schema refuses is answered on the card
    with the field's error and the edit kept (400); reject may carry a message for the
    model. An expired approval is refused by the engine."""
    approval = get_object_or_404(Approval.objects.select_related("run", "step"), pk=approval_id)
    back = reverse("console:approvals")
    changed = stale_run(request, approval.run, request.POST.get("run_version"), back)
    if changed:
        return changed
    decision = request.POST.get("decision", "")
    evidence = approval.evidence if isinstance(approval.evidence, dict) else {}
    arguments = None
    # Another word than approve/reject goes to the engine as it is: it refuses it
    # (``invalid_decision``) as it does from the CLI and the API.
    if evidence.get("kind") == "tool_call" and decision in DECISIONS:
        edit = _posted_edit(request, approval, decision)
        if edit.error or edit.errors:
            return _answer_in_place(request, approval, edit, status=400)
        confirmed = request.POST.get("confirm_arguments")
        if edit.diff and confirmed != argument_form.canonical(edit.arguments):
            return _answer_in_place(request, approval, edit, status=200)
        if edit.diff:
            arguments = edit.arguments

    def call():
        return decide(
            approval,
            decision=decision,
            user=request.user,
            comment=(request.POST.get("comment") or "").strip(),
            arguments=arguments,
            message=(request.POST.get("message") or "").strip() if decision == "reject" else "",
        )

    return perform(
        request, call, back=back, success=lambda a: f"Approval {a.pk} {a.status.lower()}."
    )


@console_view
def takeover_desk(request):
    """Open takeovers (oldest first, filtered like the runs list, paged) as cards of
    facts with one form per resolution; resolved ones below, newest first, paged on
    their own."""
    takeover_filter = TakeoverFilter(
        request.GET or None,
        queryset=Takeover.objects.filter(status=Takeover.Status.OPEN)
        .select_related("run", "step", "claimed_by")
        .order_by("created_at", "pk"),
    )
    open_page = paginate(request, takeover_filter.qs)
    attach_verify_answers(list(open_page.object_list))
    attach_entry_points(list(open_page.object_list))
    resolved = paginate(
        request,
        Takeover.objects.filter(status=Takeover.Status.RESOLVED)
        .select_related("run")
        .order_by("-resolved_at", "-pk"),
        param="resolved_page",
    )
    return render_page(
        request,
        "console/takeovers.html",
        "partials/takeover_rows.html",
        {
            "filter": takeover_filter,
            "open": open_page,
            "resolved": resolved,
            "resolutions": RESOLUTIONS,
        },
    )


def _open_takeover(request, takeover_id):
    takeover = get_object_or_404(
        Takeover.objects.select_related("run", "claimed_by"), pk=takeover_id
    )
    back = reverse("console:takeovers") + f"?run={takeover.run_id}#takeover-{takeover.pk}"
    if takeover.status != Takeover.Status.OPEN:
        return (
            takeover,
            back,
            refusal(
                request,
                title="This run changed, reload",
                message=f"takeover {takeover.pk} was already resolved by {takeover.resolved_by}.",
                back=back,
            ),
        )
    if takeover.claimed_by and takeover.claimed_by_id != request.user.pk:
        return (
            takeover,
            back,
            refusal(
                request,
                title="Claimed by someone else",
                message=f"{takeover.claimed_by.get_username()} claimed this takeover; "
                f"two people must not act on the same run at once.",
                back=back,
            ),
        )
    return takeover, back, stale_run(request, takeover.run, request.POST.get("run_version"), back)


@console_action(OPERATE_PERM)
def claim_view(request, takeover_id):
    """Claim an open takeover for the current operator."""
    takeover, back, refused = _open_takeover(request, takeover_id)
    if refused:
        return refused
    return perform(
        request,
        lambda: claim_takeover(takeover, request.user),
        back=back,
        success=lambda t: f"You hold takeover {t.pk}.",
    )


@console_action(OPERATE_PERM)
def resolve_view(request, takeover_id):
    """Resolve from one of the desk's four forms (``action``): resume (from a
    checkpoint, or where it stopped when none is chosen), retry the step, mark it done
    with evidence (and an optional JSON result), or cancel the run
    (``approvals.services.resolve_takeover``). Each form's own fields are read, no
    other's. ``against_verify`` confirms a resolution that contradicts the latest
    verify answer (refused without it: ``contradicts_verify``)."""
    takeover, back, refused = _open_takeover(request, takeover_id)
    if refused:
        return refused

    def call():
        action = request.POST.get("action", "")
        if action not in RESOLUTIONS:
            raise InvalidInput("Choose a resolution: resume, retry, mark_done or cancel.")
        reason = posted_text(request.POST, "reason")
        checkpoint, evidence, result = None, "", None
        if action == "resume":
            checkpoint = (request.POST.get("checkpoint") or "").strip() or None
        if action == "mark_done":
            evidence = posted_text(request.POST, "evidence")
            result = optional_json(request.POST, "result", label="The result")
        return resolve_takeover(
            takeover,
            action=action,
            actor=actor_of(request),
            reason=reason,
            checkpoint=checkpoint,
            evidence=evidence,
            result=result,
            against_verify=request.POST.get("against_verify") == "on",
        )

    return perform(
        request,
        call,
        back=reverse("console:run", args=[takeover.run_id]),
        success=lambda t: f"Takeover {t.pk} resolved ({t.resolution}).",
    )
