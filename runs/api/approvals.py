"""Approval endpoints: list (all visible, or one run's) and decide."""

from uuid import UUID

from ninja import Query, Router

from approvals.services import decide
from runs.api import access
from runs.api.conditional import conditional_action
from runs.api.documents import etag_header
from runs.api.errors import error_responses, not_found
from runs.api.schemas import ApprovalOut, DecideIn
from runs.engine.service import with_shown_status
from runs.models import Approval

router = Router(tags=["approvals"])
ERRORS = error_responses()


def _document(a: Approval) -> dict:
    return {
        "id": a.pk,
        "run_id": a.run_id,
        "step": a.step.name,
        "question": a.question,
        "reason": a.reason,
        "evidence": a.evidence if isinstance(a.evidence, dict) else {},
        # Past its deadline but not swept yet: EXPIRED, it can no longer be decided.
        "status": getattr(a, "shown_status", a.status),
        "decided_by": a.decided_by.get_username() if a.decided_by else None,
        "decided_at": a.decided_at,
        "comment": a.comment,
        "expires_at": a.expires_at,
        "created_at": a.created_at,
    }


def _run_of_approval(kwargs) -> object | None:
    """The id of the run an approval belongs to (its ETag guards the decision)."""
    return (
        Approval.objects.filter(pk=kwargs.get("approval_id"))
        .values_list("run_id", flat=True)
        .first()
    )


def _visible(user):
    return with_shown_status(
        Approval.objects.select_related("step", "decided_by").filter(
            run__in=access.visible_runs(user).values("pk")
        )
    )


@router.get(
    "/approvals",
    response={200: list[ApprovalOut], **ERRORS},
    summary="Approvals of the runs you can see, oldest first",
)
def list_approvals(
    request, status: Approval.Status | None = None, limit: int = Query(100, ge=1, le=500)
):
    rows = _visible(request.user).order_by("created_at", "pk")
    if status:
        rows = rows.filter(shown_status=status)
    return [_document(a) for a in rows[:limit]]


@router.get(
    "/runs/{run:run_id}/approvals",
    response={200: list[ApprovalOut], **ERRORS},
    summary="A run's approvals",
)
def run_approvals(request, run_id: UUID):
    run = access.get_run(request.user, run_id)
    return [_document(a) for a in _visible(request.user).filter(run=run).order_by("pk")]


@router.post(
    "/approvals/{approval:approval_id}/decide",
    response={200: ApprovalOut, **ERRORS},
    summary="Approve or reject",
    openapi_extra=etag_header(200),
)
@conditional_action(_run_of_approval)
def decide_approval(request, payload: DecideIn, approval_id: int):
    """Needs the ``runs.decide_approval`` permission (403 ``permission_denied``);
    ``If-Match`` is the ETag of the approval's run. The same decision again is a no-op,
    a different second one a 409 ``decision_conflict``, one past the approval's
    deadline a 409 ``approval_expired`` (the approval is then EXPIRED and its run on
    the expiry route)."""
    approval = _visible(request.user).filter(pk=approval_id).first()
    if approval is None:
        raise not_found("approval")
    approval = decide(
        approval,
        decision=payload.decision,
        user=request.user,
        comment=payload.comment,
        arguments=payload.arguments,
        message=payload.message,
    )
    return _document(_visible(request.user).get(pk=approval.pk))
