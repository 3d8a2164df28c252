"""Who may decide an approval: the approver role, never the run's own starter (unless
the workflow allows it), and a superuser only when they hold the role themselves.

Settings: ``AGENTOPS_SELF_APPROVAL_WORKFLOWS`` (workflow names whose starter may approve
their own run) and ``AGENTOPS_SUPERUSER_DECIDES`` (superusers decide without the role).
"""

from django.conf import settings
from django.contrib.auth.models import Permission
from django.core.exceptions import PermissionDenied
from django.db.models import Q

from runs.engine.service import ControlError

DECIDE_PERM = ("runs", "decide_approval")


class DecisionForbidden(ControlError, PermissionDenied):
    """A decision the approval policy refuses (403): ``code`` is
    ``self_approval_forbidden`` or ``approver_role_required``."""


def holds_role(user, perm: tuple[str, str] = DECIDE_PERM) -> bool:
    """True if ``user`` holds ``perm`` explicitly (directly or through a group); a
    superuser's implicit "every permission" does not count."""
    app_label, codename = perm
    return (
        Permission.objects.filter(content_type__app_label=app_label, codename=codename)
        .filter(Q(user=user) | Q(group__user=user))
        .exists()
    )


def check_decider(approval, user) -> None:
    """Raise if ``user`` may not decide ``approval``: ``PermissionDenied`` without the
    approver permission, ``DecisionForbidden`` for a superuser without the approver role
    (``approver_role_required``) or for the user who started the run
    (``self_approval_forbidden``)."""
    if not user.has_perm("runs.decide_approval"):
        raise PermissionDenied(f"{user.get_username()} may not decide approvals")
    if user.is_superuser and not settings.AGENTOPS_SUPERUSER_DECIDES and not holds_role(user):
        raise DecisionForbidden(
            "approver_role_required",
            "superusers decide approvals only when they hold the approver role",
        )
    run = approval.run
    if (
        run.owner_id is not None
        and run.owner_id == user.pk
        and run.workflow not in settings.AGENTOPS_SELF_APPROVAL_WORKFLOWS
    ):
        raise DecisionForbidden(
            "self_approval_forbidden",
            "you started this run; another approver must decide "
            f"(AGENTOPS_SELF_APPROVAL_WORKFLOWS can allow it for {run.workflow!r})",
        )
