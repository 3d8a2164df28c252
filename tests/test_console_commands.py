"""``setup_roles`` and ``seed_demo``: the roles' permissions, and demo data that is
consistent with the engine's rules and loads on every console page."""

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db.models import Count, Max
from django.urls import reverse

from runs.models import Event, Message, Run, Takeover
from runs.states import RunStatus
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.services import BACKENDS

pytestmark = pytest.mark.django_db


def perms(role: str) -> set[str]:
    group = Group.objects.get(name=role)
    return {
        f"{p.content_type.app_label}.{p.codename}"
        for p in group.permissions.select_related("content_type")
    }


def test_it_creates_the_three_roles_with_their_permissions_idempotently(capsys):
    call_command("setup_roles")
    call_command("setup_roles")
    assert Group.objects.filter(name__in=["viewer", "operator", "approver"]).count() == 3
    viewer, operator, approver = perms("viewer"), perms("operator"), perms("approver")
    assert {"runs.view_run", "runs.view_event", "runs.view_takeover"} <= viewer
    assert not any(
        p.split(".")[1].startswith(("add_", "change_", "delete_"))
        for p in viewer | operator | approver
    )
    assert operator - viewer == {"runs.operate_run"}
    assert approver - viewer == {"runs.decide_approval"}
    assert "operator: " in capsys.readouterr().out


def test_it_seeds_a_consistent_mix_of_every_state(capsys):
    call_command("seed_demo", "--runs", "120")
    out = capsys.readouterr().out
    assert "seeded 120 runs" in out
    for line in (
        "viewer / viewer-demo-pw / viewer",
        "operator / operator-demo-pw / operator",
        "approver / approver-demo-pw / approver",
    ):
        assert line in out
    statuses = set(Run.objects.values_list("status", flat=True))
    assert statuses == set(RunStatus.values)
    assert Run.objects.filter(stuck_since__isnull=False).exists()
    assert Run.objects.filter(steps__status="UNKNOWN").exists()
    assert Run.objects.filter(event_seq__gt=200).exists()  # long event histories
    # Gap-free event seqs per run, matching the run's counter.
    for run_id, n, top in Event.objects.values_list("run_id").annotate(
        n=Count("id"), top=Max("seq")
    ):
        assert n == top == Run.objects.get(pk=run_id).event_seq
    # At most one open takeover per run, and only on paused runs.
    open_takeovers = Takeover.objects.filter(status="OPEN")
    assert open_takeovers.values("run").annotate(n=Count("id")).filter(n__gt=1).count() == 0
    assert set(open_takeovers.values_list("run__status", flat=True)) == {"PAUSED"}
    # Message seqs per thread match the thread's counter.
    for run in Run.objects.select_related("thread")[:30]:
        seqs = list(
            Message.objects.filter(thread=run.thread).order_by("seq").values_list("seq", flat=True)
        )
        assert seqs == list(range(1, run.thread.message_seq + 1))


def test_the_demo_users_can_use_every_page(client):
    call_command("seed_demo", "--runs", "40")
    assert client.login(username="operator", password="operator-demo-pw")
    run = Run.objects.filter(status="PAUSED").first()
    for url in (
        reverse("console:overview"),
        reverse("console:triage"),
        reverse("console:runs"),
        reverse("console:run", args=[run.pk]),
        reverse("console:unknowns"),
        reverse("console:approvals"),
        reverse("console:takeovers"),
        reverse("console:workers"),
        reverse("console:audit"),
        reverse("admin:runs_run_changelist"),
    ):
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_demo_runs_as_a_command_on_each_backend(deployment_factory, backend):
    deployment = deployment_factory(backend)
    done = deployment.manage("seed_demo", "--runs", "300", timeout=300, check=True)
    assert "seeded 300 runs" in done.stdout
    again = deployment.manage("seed_demo", "--runs", "10", timeout=300, check=True)
    assert "seeded 10 runs" in again.stdout
    deployment.manage("check", check=True)
