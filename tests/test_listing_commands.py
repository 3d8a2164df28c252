"""The listing subcommands (``approvals list``, ``approvals takeovers``, ``runs stuck``)
in each form they print: text lines, ``--json`` and ``--ids``, over the demo seed's runs."""

import io
import json

import pytest
from django.core.management import call_command

from lab.demo_seed import Seeder
from runs.models import Approval, Takeover

pytestmark = pytest.mark.django_db


def command(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def seeded():
    Seeder(3, seed=5, scenarios=["waiting_approval", "unknown", "stuck"]).seed()


def test_it_says_so_when_there_is_nothing_to_list():
    assert command("approvals", "list") == "no approvals\n"
    assert command("approvals", "takeovers") == "no takeovers\n"
    assert command("runs", "stuck") == "no stuck runs\n"
    assert json.loads(command("approvals", "takeovers", "--json")) == []


def test_it_lists_pending_approvals_as_lines_json_and_ids(seeded):
    pending = list(Approval.objects.filter(status=Approval.Status.PENDING).order_by("-pk"))
    assert pending
    assert command("approvals", "list", "--ids").split() == [str(a.pk) for a in pending]
    assert [r["id"] for r in json.loads(command("approvals", "list", "--json"))] == [
        a.pk for a in pending
    ]
    assert command("approvals", "list").splitlines() == [
        f"#{a.pk} PENDING   run {a.run_id} step {a.step.name}: {a.question}" for a in pending
    ]


def test_it_lists_open_takeovers_with_their_suggestion_and_checkpoints(seeded):
    open_ = list(Takeover.objects.filter(status=Takeover.Status.OPEN).order_by("-pk"))
    assert open_
    assert command("approvals", "takeovers", "--ids").split() == [str(t.pk) for t in open_]
    lines = command("approvals", "takeovers").splitlines()
    assert len(lines) == 3 * len(open_)
    for takeover, (head, suggested, checkpoints) in zip(
        open_, zip(lines[::3], lines[1::3], lines[2::3], strict=True), strict=True
    ):
        prefix = f"#{takeover.pk} OPEN     {takeover.cause:<26} run {takeover.run_id} at "
        assert head.startswith(prefix)
        assert suggested == f"    suggested: {takeover.suggested_action}"
        assert checkpoints == f"    checkpoints: {', '.join(takeover.checkpoints) or '-'}"


def test_it_lists_stuck_runs_as_lines_and_json(seeded):
    [row] = json.loads(command("runs", "stuck", "--json"))
    assert command("runs", "stuck").splitlines() == [
        f"{row['run_id']} {row['workflow']} {row['status']} stuck since "
        f"{row['stuck_since']} (last event {row['last_event_at']})"
    ]
