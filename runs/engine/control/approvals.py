"""Approval steps: asking, deciding, expiring, and continuing the run
on the route the decision picks.

The engine writes the Approval rows (``runs.models.Approval``) through the gateway's
moves; the approvals app's services, views, admin and CLI sit on top of these
functions and add people's concerns (permissions, the decision words).
"""

from typing import Any

from django.conf import settings
from django.db.models import (
    Case,
    CharField,
    F,
    Q,
    Value,
    When,
)
from django.db.models.functions import Now

from runs.engine.errors import ControlError
from runs.engine.state.clock import deadline_in
from runs.engine.state.gateway import RunTx, run_transaction
from runs.engine.state.store import store
from runs.engine.state.store_interface import Decision
from runs.models import Approval, Event
from runs.states import RunStatus, command_allows, command_states


class DecisionConflict(ControlError):
    """A second, different decision on an approval that is already decided (or expired
    or cancelled). ``approval`` is the row as decided."""

    def __init__(self, approval, wanted: str, *, other_terms: bool = False):
        super().__init__(
            "decision_conflict",
            f"approval {approval.pk} is already {approval.status}"
            + (f" by {approval.decided_by.get_username()}" if approval.decided_by_id else "")
            + (
                f" with other edited arguments or message; cannot {wanted} it with these"
                if other_terms
                else f"; cannot {wanted} it"
            ),
        )
        self.approval = approval


class ApprovalExpired(DecisionConflict):
    """A decision on an approval past its ``expires_at`` (database clock): refused with
    code ``approval_expired``. The approval is EXPIRED and its run on the expiry route,
    as the sweeper would have left them. ``approval`` is the row as expired."""

    def __init__(self, approval):
        ControlError.__init__(
            self,
            "approval_expired",
            f"approval {approval.pk} expired at {approval.expires_at:%Y-%m-%d %H:%M:%S %Z}; "
            "it can no longer be decided",
        )
        self.approval = approval


def overdue() -> Q:
    """The rule of expiry: a PENDING approval whose ``expires_at`` has passed on the
    database clock. The sweeper, a decision and every list apply this one condition."""
    return Q(status="PENDING", expires_at__lt=Now())


def with_shown_status(queryset):
    """``queryset`` of approvals annotated with ``shown_status``: ``EXPIRED`` for one
    past its deadline (``overdue``) that no sweep has moved yet, else its ``status``.
    Lists show and filter by it, so nothing past its deadline looks decidable."""
    return queryset.annotate(
        shown_status=Case(
            When(overdue(), then=Value("EXPIRED")),
            default=F("status"),
            output_field=CharField(),
        )
    )


#: The parts of a decision's event that change what the run does next (an agent's
#: tool call): a repeated decision must carry the same ones to be the same decision.
DECISION_TERMS = ("edited", "message")


def _other_terms(approval, target: str, extra_event: dict[str, Any] | None) -> bool:
    """True if ``approval`` was decided ``target`` with other terms than ``extra_event``
    (edited arguments or a message for the model): a retry carries the same terms, a
    correction does not, and must not be dropped in silence."""
    recorded = (
        Event.objects.filter(
            run_id=approval.run_id,
            type=f"approval.{target.lower()}",
            payload__approval_id=approval.pk,
        )
        .values_list("payload", flat=True)
        .last()
    ) or {}
    wanted = extra_event or {}
    return any(recorded.get(key) != wanted.get(key) for key in DECISION_TERMS)


def commit_approval_request(ctx, request: dict[str, Any], worker_id: str) -> None:
    """Called by the executor when an approval step's function returned ``request``
    (``{"question", "reason", "evidence"}``): in one transaction fenced by the attempt,
    the step goes WAITING with its lease released, the Approval row is created with its
    routes and expiry, and the run goes WAITING_APPROVAL. Nothing is dispatched until a
    decision, so no worker holds anything while the run waits. A cancel requested
    meanwhile cancels the step instead.
    """
    run, step, attempt, step_def = ctx.run, ctx.step, ctx.attempt, ctx.step_def
    options = step_def.options
    approve_to = ctx.workflow.next_after(step.name)
    reject_to = options.get("on_reject")
    expire_to = options.get("on_expire") or reject_to
    for target in (reject_to, expire_to):
        if target is not None:
            ctx.workflow.get(target)
    ttl = options.get("expires_after")
    ttl = settings.AGENTOPS_APPROVAL_EXPIRY_SECONDS if ttl is None else ttl
    with run_transaction(run.pk) as tx:
        if not tx.finish_waiting(
            step, attempt, actor=worker_id, waiting_for="approval", cancel_before="approval"
        ):
            return
        approval = Approval.objects.create(
            run_id=run.pk,
            step_id=step.pk,
            question=str(request.get("question", ""))[:4000],
            reason=str(request.get("reason", "")),
            evidence=request.get("evidence") or {},
            expires_at=deadline_in(ttl),
            routes={"approve": approve_to, "reject": reject_to, "expire": expire_to},
        )
        tx.event(
            "approval.requested",
            {
                "approval_id": approval.pk,
                "question": approval.question,
                "reason": approval.reason,
                "expires_in_s": ttl or None,
            },
            step_id=step.pk,
            actor=worker_id,
        )
        tx.transition_run(
            RunStatus.WAITING_APPROVAL,
            actor=worker_id,
            reason=f"waiting for approval {approval.pk}",
            current_step=step.pk,
        )


def decide(
    approval_id: int,
    target: str,
    *,
    actor: str,
    user=None,
    comment: str = "",
    extra_output: dict[str, Any] | None = None,
    extra_event: dict[str, Any] | None = None,
):
    """Record the decision ``target`` (``Approval.Status.APPROVED`` or ``REJECTED``) by
    ``actor`` (``user`` as ``decided_by``) and continue the run on the matching route,
    in one transaction; ``extra_output`` joins the waiting step's output and
    ``extra_event`` the decision's event (an agent's tool-call terms). Returns the
    approval as stored afterwards.

    Idempotent: the same decision again, with the same terms (``DECISION_TERMS``),
    returns the approval unchanged (one decision, one event). Raises
    ``ApprovalExpired`` (``approval_expired``) on an approval past its deadline: one
    still PENDING is expired first, committed with its expiry route as the sweeper
    would (``expire_one``). Raises ``DecisionConflict`` for a different decision after
    the first, for the same one with other edited arguments or another message, or on
    a cancelled approval; ``ControlError("not_allowed_in_state")`` when the run does
    not wait for it.
    """
    run_id = Approval.objects.values_list("run_id", flat=True).get(pk=approval_id)
    with run_transaction(run_id) as tx:
        current = Approval.objects.select_for_update().get(pk=approval_id)
        expired = current.status == Approval.Status.EXPIRED or (
            current.status == Approval.Status.PENDING
            and expire_one(tx, current.pk, current.step_id, actor=actor, at_decision=True)
        )
        if not expired:
            _decide_pending(tx, current, target, actor, user, comment, extra_output, extra_event)
    current.refresh_from_db()
    if expired:
        # Raised after the commit: the expiry stands though the decision is refused.
        raise ApprovalExpired(current)
    return current


def _decide_pending(
    tx: RunTx,
    current,
    target: str,
    actor: str,
    user,
    comment: str,
    extra_output: dict[str, Any] | None,
    extra_event: dict[str, Any] | None,
) -> None:
    """The body of ``decide`` for an approval not past its deadline, on the locked run."""
    if current.status == target:
        if _other_terms(current, target, extra_event):
            wanted = "approve" if target == "APPROVED" else "reject"
            raise DecisionConflict(current, wanted, other_terms=True)
        return
    if current.status != Approval.Status.PENDING:
        raise DecisionConflict(current, "approve" if target == "APPROVED" else "reject")
    if not command_allows("decide_approval", tx.run.status):
        raise ControlError(
            "not_allowed_in_state",
            f"run is {tx.run.status}; approvals are decided on "
            f"{command_states('decide_approval')} runs",
        )
    output = {"decision": target.lower(), "comment": comment}
    if user is not None:
        output = {"decision": target.lower(), "by": user.get_username(), "comment": comment}
    store().decide(
        tx,
        Decision(
            current.pk,
            current.step_id,
            target,
            actor,
            output={**output, **(extra_output or {})},
            payload={
                "approval_id": current.pk,
                "comment": comment,
                "reason": comment,
                **(extra_event or {}),
            },
            fields={"decided_by": user, "decided_at": Now(), "comment": comment},
        ),
    )


def expire_one(tx: RunTx, approval_id: int, step_id: int, *, actor: str, at_decision=False) -> bool:
    """On the locked run ``tx``: move the approval to EXPIRED if it is past its deadline
    (``overdue``, database clock) and, when its run waits for it, continue on the expiry
    route (``Store.decide``). ``at_decision``: found by someone deciding it (the event
    says so), not by a sweep. Returns whether it expired now."""
    reason = "decided after expires_at" if at_decision else "no decision before expires_at"
    return store().decide(
        tx,
        Decision(
            approval_id,
            step_id,
            Approval.Status.EXPIRED,
            actor,
            output={"decision": "expired"},
            payload={"approval_id": approval_id, "reason": reason},
            fields={"decided_at": Now()},
            only_if=overdue(),
        ),
    )


def expire_approvals(actor: str, batch: int) -> int:
    """Sweeper task: PENDING approvals past ``expires_at`` that nobody touched become
    EXPIRED and their run takes the expiry route (``expire_one``). Returns how many
    expired."""
    due = list(
        Approval.objects.filter(overdue())
        .order_by("expires_at")
        .values_list("pk", "run_id", "step_id")[:batch]
    )
    done = 0
    for approval_id, run_id, step_id in due:
        with run_transaction(run_id) as tx:
            done += expire_one(tx, approval_id, step_id, actor=actor)
    return done
