"""The console's roles as Django groups with permissions (``setup_roles`` creates them).

- viewer: read everything (``view_*`` of the runs app's models, approvals and takeovers
  among them, which includes ``runs.view_run`` for the pages and ``runs.view_artifact``
  for downloads);
- operator: viewer + ``runs.operate_run`` (cancel, re-dispatch, retry, resume, resolve
  unknowns and takeovers);
- approver: viewer + ``runs.decide_approval``.
"""

from django.contrib.auth.models import Group, Permission
from django.db.models import Q

ROLES = ("viewer", "operator", "approver")
EXTRA = {
    "viewer": [],
    "operator": [("runs", "operate_run")],
    "approver": [("runs", "decide_approval")],
}


def _view_permissions() -> list[Permission]:
    return list(
        Permission.objects.filter(content_type__app_label="runs", codename__startswith="view_")
    )


def setup_roles() -> dict[str, Group]:
    """Create or update the three groups so each has exactly its permissions; returns
    ``{role: group}``. Idempotent. Needs migrations applied (permissions exist)."""
    view = _view_permissions()
    groups = {}
    for role in ROLES:
        group, _ = Group.objects.get_or_create(name=role)
        extra = EXTRA[role]
        wanted = list(view)
        if extra:
            condition = Q()
            for app, codename in extra:
                condition |= Q(content_type__app_label=app, codename=codename)
            wanted += list(Permission.objects.filter(condition))
        group.permissions.set(wanted)
        groups[role] = group
    return groups
