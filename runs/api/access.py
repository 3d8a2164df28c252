"""Who may see and act on which runs through the API.

A token sees only its owner's threads and runs; anything else is a 404, so a token
cannot even learn that another owner's run exists. Tokens of staff users act as their
console roles: ``runs.view_run`` sees every run, ``runs.operate_run`` may cancel,
resume and resolve any run it sees (approvals keep their own permission, checked by
``approvals.services.decide``).
"""

import uuid

from django.db.models import QuerySet

from runs.api.errors import ApiError, not_found
from runs.models import Run


def actor(user) -> str:
    """The event actor string for a person: ``user:<username>``."""
    return f"user:{user.get_username()}"


def sees_all(user) -> bool:
    return bool(user.is_staff and user.has_perm("runs.view_run"))


def visible_runs(user) -> QuerySet[Run]:
    """The runs ``user``'s token may read."""
    runs = Run.objects.select_related("thread")
    return runs if sees_all(user) else runs.filter(owner=user)


def get_run(user, run_id: uuid.UUID | str) -> Run:
    """The run if ``user`` may see it; raises a 404 ``ApiError`` otherwise."""
    try:
        return visible_runs(user).get(pk=uuid.UUID(str(run_id)))
    except (ValueError, Run.DoesNotExist):
        raise not_found() from None


def get_run_to_operate(user, run_id: uuid.UUID | str) -> Run:
    """The run if ``user`` may act on it (its owner, or staff with ``runs.operate_run``);
    404 if not visible, 403 ``permission_denied`` if visible but not operable."""
    run = get_run(user, run_id)
    if run.owner_id != user.pk and not (user.is_staff and user.has_perm("runs.operate_run")):
        raise ApiError(403, "permission_denied", "you may read this run but not act on it")
    return run
