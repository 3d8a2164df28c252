"""A resume from a checkpoint before a fan-out supersedes each map step's branches as a
set: one UPDATE and one event (count and seq range) per map step, so 10,000 branches
cost the resume the statements of three, and the preview lists them as one line. The
pause before it lists no branch row in its takeover. A replay's preview of a finished
fanned-out run lists its branches the same way. A pause requested while branches run
shows in the API's run document, the typed client and ``runs status``."""

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apitokens.services import create_token
from runs.console.roles import setup_roles
from runs.engine.control.lifecycle import pause_run, settle_pause
from runs.engine.control.replay import plan_replay
from runs.engine.control.rewind import plan_resume, resume_from_checkpoint
from runs.models import Event, Run, Step, Takeover
from runs.states import RunStatus, StepStatus
from tests.support.api_client import in_process_client
from tests.support.fanout import fanned_out_run
from tests.support.states import arrange

pytestmark = pytest.mark.django_db


def _fanned_out_run(branches: int):
    """A fanned-out run: every third branch SUCCEEDED, the others PENDING (none running)."""
    return fanned_out_run(
        branches, lambda i: StepStatus.SUCCEEDED if i % 3 == 0 else StepStatus.PENDING
    )


def _resume(run) -> int:
    # Paused with no branch running: at once, its takeover naming no branch row.
    pause_run(run, actor="alice", reason="look first")
    takeover = Takeover.objects.get(run=run)
    assert takeover.done_summary["completed_steps"] == []
    with CaptureQueriesContext(connection) as queries:
        resume_from_checkpoint(run, "start", actor="alice", reason="fan out afresh")
    return len(queries)


def test_it_supersedes_ten_thousand_branches_with_the_statements_of_three():
    small, _ = _fanned_out_run(3)
    big, parent = _fanned_out_run(10_000)

    plan = plan_resume(big, "start")
    assert [row["label"] for row in plan.steps_to_supersede] == [
        f"fetch#{parent.seq} (WAITING)",
        "fetch#2..10001 (10000 branches: PENDING 6666, SUCCEEDED 3334)",
    ]

    few = _resume(small)
    many = _resume(big)

    assert many == few
    assert set(
        Step.objects.filter(run=big, branch_of__isnull=False).values_list("status", flat=True)
    ) == {StepStatus.SUPERSEDED}
    events = list(Event.objects.filter(run=big).values_list("type", "step_id", "payload"))
    assert [(s, p) for t, s, p in events if t == "step.branches_superseded"] == [
        (
            parent.pk,
            {
                "count": 10_000,
                "first_seq": 2,
                "last_seq": 10_001,
                "by_generation": 2,
                "checkpoint": "start",
            },
        )
    ]
    # No event per branch: the map step's own row is superseded as any step.
    assert [s for t, s, _ in events if t == "step.superseded"] == [parent.pk]
    resumed = next(p for t, _, p in events if t == "run.resumed_from_checkpoint")
    assert resumed["superseded_steps"] == 10_001
    # The new generation fans out again from its own map step.
    fresh = Step.objects.get(run=big, generation=2)
    assert (fresh.name, fresh.status, fresh.branch_of_id) == ("fetch", StepStatus.PENDING, None)


def _replay_preview(run) -> tuple[list[str], int]:
    arrange(Run.objects.filter(pk=run.pk), status=RunStatus.FAILED)
    with CaptureQueriesContext(connection) as queries:
        plan = plan_replay(run)
    return [row["label"] for row in plan.as_dict()["steps_replaced"]], len(queries)


def test_a_replay_preview_lists_ten_thousand_branches_as_one_line_in_constant_statements():
    small, _ = _fanned_out_run(3)
    big, parent = _fanned_out_run(10_000)

    few_labels, few = _replay_preview(small)
    labels, many = _replay_preview(big)

    assert few_labels == [
        f"fetch#{parent.seq} (WAITING)",
        "fetch#2..4 (3 branches: PENDING 2, SUCCEEDED 1)",
    ]
    assert labels == [
        f"fetch#{parent.seq} (WAITING)",
        "fetch#2..10001 (10000 branches: PENDING 6666, SUCCEEDED 3334)",
    ]
    assert many == few


def test_a_requested_pause_shows_in_the_api_client_and_runs_status():
    run, _ = _fanned_out_run(3)
    arrange(Step.objects.filter(run=run, position__in=(1, 2)), status=StepStatus.RUNNING)
    pause_run(run, actor="alice", reason="look first")
    desk = User.objects.create_user("desk", is_staff=True)
    desk.groups.add(setup_roles()["viewer"])
    api = in_process_client(create_token(desk)[1])
    line = "pause requested, waiting for the running steps (2 running)"

    assert api.get_run(str(run.pk)).pause_progress == line
    out = StringIO()
    call_command("runs", "status", str(run.pk), stdout=out)
    assert line in out.getvalue().splitlines()
    out = StringIO()
    call_command("runs", "status", str(run.pk), "--json", stdout=out)
    assert json.loads(out.getvalue())["pause_progress"] == line

    arrange(Step.objects.filter(run=run, position__in=(1, 2)), status=StepStatus.PENDING)
    settle_pause(run.pk, actor="alice")
    assert api.get_run(str(run.pk)).pause_progress is None
