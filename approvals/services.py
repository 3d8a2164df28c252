"""People in the loop, on top of the engine: who may decide an
approval and with which words, who works on a takeover, and how it is resolved.

The moves themselves (continue the run after a decision, resolve a takeover) are the
engine's (``runs.engine.control.approvals``, ``runs.engine.control.resolutions``); this
module adds permissions and the decision vocabulary, and views, the API, the admin and
the CLI call it and stay thin. Nothing in the engine imports this module.
"""

from django.core.exceptions import PermissionDenied

from approvals.policy import check_decider
from approvals.tool_calls import decision_terms
from runs.engine import service as engine
from runs.engine.service import (
    MAX_CHARS,
    RESOLUTIONS,
    ControlError,
    DecisionConflict,
    check_length,
    decide_approval,
    resolve_takeover,
)
from runs.models import Approval, Takeover

DECISIONS = {"approve": Approval.Status.APPROVED, "reject": Approval.Status.REJECTED}
#: The longest approver's comment and message for the model, in characters, on every
#: channel (the API's schemas use these).
MAX_COMMENT_CHARS = MAX_CHARS["comment"]
MAX_MESSAGE_CHARS = MAX_CHARS["message"]

__all__ = [
    "DECISIONS",
    "RESOLUTIONS",
    "DecisionConflict",
    "claim_takeover",
    "decide",
    "resolve_takeover",
    "user_actor",
]


def user_actor(user) -> str:
    """The event actor string for a person: ``user:<username>``."""
    return f"user:{user.get_username()}"


def decide(
    approval: Approval,
    *,
    decision: str,
    user,
    comment: str = "",
    arguments=None,
    message: str = "",
) -> Approval:
    """Record ``decision`` ("approve" or "reject") by ``user`` and continue the run on
    the matching route, in one transaction (``runs.engine.control.approvals.decide``).
    On an agent's tool call, ``arguments`` (with approve) replaces the call's arguments
    and ``message`` (with reject) reaches the model instead of the tool result
    (``approvals.tool_calls``; ``invalid_arguments`` with field errors, nothing
    changed, when they do not fit the tool).

    Idempotent: the same decision again, with the same edited arguments and message,
    returns the approval unchanged (one decision, one event). Raises what
    ``approvals.policy.check_decider`` raises (no approver permission, a superuser
    without the role, self-approval), ``DecisionConflict`` for a different decision
    after the first, for the same one with other edited arguments or another message
    (a correction that came too late is refused, not dropped), or on an expired or
    cancelled approval; ``ControlError("invalid_decision")`` for another word.
    """
    if not isinstance(decision, str) or decision not in DECISIONS:
        raise ControlError(
            "invalid_decision",
            f"decision must be approve or reject, not {decision!r}",
            {"decision": "must be approve or reject"},
        )
    check_length(comment, "comment", MAX_COMMENT_CHARS)
    check_length(message, "message", MAX_MESSAGE_CHARS)
    check_decider(approval, user)
    extra_output, extra_event = decision_terms(approval, decision, arguments, message)
    return decide_approval(
        approval.pk,
        DECISIONS[decision],
        actor=user_actor(user),
        user=user,
        comment=comment,
        extra_output=extra_output,
        extra_event=extra_event,
    )


def claim_takeover(takeover: Takeover, user) -> Takeover:
    """``user`` takes the open takeover on (so two operators do not both act). Claiming
    again by the same user is a no-op. Raises ``PermissionDenied`` without
    ``runs.operate_run``, ``ControlError`` ``takeover_resolved`` / ``already_claimed``."""
    if not user.has_perm("runs.operate_run"):
        raise PermissionDenied(f"{user.get_username()} may not operate runs")
    return engine.claim_takeover(takeover, user, actor=user_actor(user))
