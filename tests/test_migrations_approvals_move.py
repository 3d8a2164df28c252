"""Approval and Takeover moved from the approvals app into the runs app: a database at
the migrations before the move keeps its rows, and its grants of the approver
permission, when it migrates forward."""

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from runs.engine.control.lifecycle import start_run
from runs.models import Approval, Step, Takeover

MOVE = ("runs", "0021_approval_takeover_state")
APPROVALS_BEFORE = ("approvals", "0003_non_determinism_cause")


def _migrate(targets: list[tuple[str, str]]) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    ContentType.objects.clear_cache()


def _labels() -> list[tuple[str, str]]:
    return sorted(
        ContentType.objects.filter(model__in=["approval", "takeover"]).values_list(
            "app_label", "model"
        )
    )


def _may_decide(user: User, app_label: str) -> bool:
    return User.objects.get(pk=user.pk).has_perm(f"{app_label}.decide_approval")


@pytest.mark.django_db
def test_it_keeps_rows_and_grants_across_the_move():
    run = start_run("room_temperature", thread_id="t-move", input={"question": "warm?"})
    step = Step.objects.filter(run=run).first()
    approval = Approval.objects.create(run=run, step=step, question="ok?")
    takeover = Takeover.objects.create(run=run, cause="operator_request", reason="look")
    ann = User.objects.create(username="ann")
    ann.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    if connection.vendor == "postgresql":
        # Checked now, not at the test's commit: PostgreSQL refuses to ALTER a table
        # (a later migration's unapply) while deferred foreign key checks are pending.
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    graph = MigrationExecutor(connection).loader.graph
    [runs_before] = [p for p in graph.node_map[MOVE].parents if p.key[0] == "runs"]

    _migrate([runs_before.key, APPROVALS_BEFORE])
    assert _labels() == [("approvals", "approval"), ("approvals", "takeover")]
    assert _may_decide(ann, "approvals")

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    assert _labels() == [("runs", "approval"), ("runs", "takeover")]
    assert _may_decide(ann, "runs") and not _may_decide(ann, "approvals")
    assert list(Approval.objects.values_list("pk", "question", "status")) == [
        (approval.pk, "ok?", "PENDING")
    ]
    assert list(Takeover.objects.values_list("pk", "reason", "status")) == [
        (takeover.pk, "look", "OPEN")
    ]
