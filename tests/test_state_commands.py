"""One truth for the state machine: README's diagram and command table are generated
from ``runs/states.py``, and each operator command applies exactly in the states the
table gives it."""

from io import StringIO

import pytest
from django.core.management import call_command

from approvals.services import decide, resolve_takeover
from runs.engine.control.lifecycle import ControlError, pause_run, start_run
from runs.models import Approval, Run, Takeover
from runs.states import RUN_COMMANDS, RunStatus
from tests.support.in_process import actors, device_dir, fast_passwords, run_worker_in_process
from tests.support.states import arrange

__all__ = ["actors", "device_dir", "fast_passwords"]


def test_readme_shows_the_generated_state_machine():
    out = StringIO()
    call_command("states", "--check-readme", stdout=out)
    assert "matches" in out.getvalue()


def test_pause_is_allowed_wherever_the_table_leads_to_paused():
    assert RUN_COMMANDS["pause"] == {
        RunStatus.PENDING,
        RunStatus.RUNNING,
        RunStatus.WAITING_APPROVAL,
        RunStatus.WAITING_EXTERNAL,
    }


@pytest.mark.django_db
@pytest.mark.parametrize("status", RunStatus.values)
def test_runs_pause_applies_exactly_in_the_tables_states(status):
    run = start_run("room_temperature", thread_id=f"p-{status}", input={"question": "warm?"})
    arrange(Run.objects.filter(pk=run.pk), status=status)
    if status in RUN_COMMANDS["pause"]:
        assert pause_run(run, actor="cli", reason="look first").status == RunStatus.PAUSED
    else:
        with pytest.raises(ControlError) as caught:
            pause_run(run, actor="cli", reason="look first")
        assert caught.value.code in ("not_allowed_in_state", "run_terminal")
        if caught.value.code == "not_allowed_in_state":
            assert "WAITING_APPROVAL" in caught.value.message


@pytest.mark.django_db(transaction=True)
def test_a_paused_approval_waits_again_after_resume_and_can_then_be_decided(actors):
    run = start_run("weekly_report", thread_id="R", input={"week": "2026-W48"})
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_APPROVAL
    approval = Approval.objects.get(run=run)

    pause_run(run, actor="user:bob", reason="legal wants a look")
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED
    with pytest.raises(ControlError) as caught:
        decide(approval, decision="approve", user=actors["carol"])
    assert caught.value.code == "not_allowed_in_state"

    takeover = Takeover.objects.get(run=run, status=Takeover.Status.OPEN)
    resolve_takeover(takeover, action="resume", actor="user:bob", reason="legal is fine")
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_APPROVAL
    decide(approval, decision="approve", user=actors["carol"])
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
