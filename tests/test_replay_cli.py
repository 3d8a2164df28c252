"""``runs replay``: one run and in bulk, through the real command, with real in-process
workers and the simulated lamp (its failures injected through its own state)."""

import io
import json
import time

import pytest
from django.core.management import CommandError, call_command

from runs.engine.control import lifecycle
from runs.models import Checkpoint, Event, Operation, Run, Step
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import failed_runs, run_worker_in_process

pytestmark = pytest.mark.django_db(transaction=True)


def replay(*args) -> str:
    out = io.StringIO()
    call_command("runs", "replay", *args, stdout=out)
    return out.getvalue()


def test_it_previews_one_replay_as_json_and_changes_nothing(actors):
    [run] = failed_runs(1, request="lower it by 10%")
    counts = (Run.objects.count(), Event.objects.count(), Operation.objects.count())
    doc = json.loads(replay(str(run.pk), "--dry-run", "--json", "--reason", "look"))
    assert doc["dry_run"] is True and doc["checkpoint"]["name"] == "start"
    assert doc["steps_to_run"] == ["read_lamp", "plan", "set_brightness", "reply"]
    assert doc["steps_replaced"][0]["error_code"] == "PERMISSION_DENIED"
    assert (Run.objects.count(), Event.objects.count(), Operation.objects.count()) == counts


def test_it_replays_one_run_and_names_the_new_one(actors):
    [run] = failed_runs(1, request="lower it by 10%")
    text = replay(str(run.pk), "--reason", "lamp fixed", "--as", "bob")
    [new] = run.replays.all()
    assert f"replayed as {new.pk}" in text
    assert Event.objects.get(run=new, type="run.replay_created").actor == "user:bob"
    out = io.StringIO()
    call_command("runs", "status", str(run.pk), stdout=out)
    assert f"replayed as: {new.pk}" in out.getvalue()
    out = io.StringIO()
    call_command("runs", "status", str(new.pk), "--json", stdout=out)
    assert json.loads(out.getvalue())["replay_of"] == {"run": str(run.pk), "checkpoint": "start"}


def test_it_refuses_bad_requests_with_a_message(actors):
    [run] = failed_runs(1, request="lower it by 10%")
    with pytest.raises(CommandError, match="reason_required"):
        replay(str(run.pk))
    with pytest.raises(CommandError, match="unknown_checkpoint"):
        replay(str(run.pk), "--from", "after:nope", "--reason", "x")
    with pytest.raises(CommandError, match="--from-failed-step"):
        replay("--status", "FAILED", "--reason", "x")
    with pytest.raises(CommandError, match="rate"):
        replay("--status", "FAILED", "--from-failed-step", "--rate", "0", "--reason", "x")
    with pytest.raises(CommandError, match="invalid_status"):
        replay("--status", "RUNNING", "--from-failed-step", "--reason", "x")
    with pytest.raises(
        CommandError, match=r"registered workflows:.*dim_lights.*\[unknown_workflow\]"
    ):
        replay("--status", "FAILED", "--workflow", "nope", "--from-failed-step", "--reason", "x")
    with pytest.raises(CommandError, match="rate"):
        replay("--status", "FAILED", "--from-failed-step", "--rate", "nan", "--reason", "x")
    with pytest.raises(CommandError, match="permission_denied"):
        replay(str(run.pk), "--reason", "x", "--as", "alice")
    assert not Run.objects.filter(replay_of__isnull=False).exists()


def test_a_bulk_replay_of_50_failed_runs_at_rate_10_takes_5_seconds(actors):
    runs = failed_runs(50, request="lower it by 10%")
    began = time.monotonic()
    doc = json.loads(
        replay(
            "--status",
            "FAILED",
            "--workflow",
            "dim_lights",
            "--error-code",
            "PERMISSION_DENIED",
            "--from-failed-step",
            "--rate",
            "10",
            "--reason",
            "lamp firmware fixed",
            "--json",
        )
    )
    assert time.monotonic() - began >= 5.0
    assert len(doc["created"]) == 50 and doc["skipped"] == []
    replays = list(Run.objects.filter(replay_of__in=runs).order_by("created_at"))
    assert len(replays) == 50
    # At most 10 start in any one second (database clock): each replay is created, its
    # first step due at once, a tenth of a second after the one before.
    created = [r.created_at for r in replays]
    assert all((b - a).total_seconds() >= 0.09 for a, b in zip(created, created[1:], strict=False))
    assert (created[-1] - created[0]).total_seconds() >= 4.9
    firsts = Step.objects.filter(run__in=replays, seq=1)
    due = sorted(firsts.values_list("not_before", flat=True))
    assert all((b - a).total_seconds() >= 0.09 for a, b in zip(due, due[1:], strict=False))
    run_worker_in_process()
    assert set(firsts.values_list("status", flat=True)) == {"SUCCEEDED"}

    again = json.loads(
        replay("--status", "FAILED", "--from-failed-step", "--reason", "twice?", "--json")
    )
    assert again["created"] == [] and Run.objects.filter(replay_of__isnull=False).count() == 50


def test_a_bulk_dry_run_lists_each_run_and_changes_no_row(actors):
    failed_runs(3, request="lower it by 10%")
    counts = (Run.objects.count(), Checkpoint.objects.count(), Event.objects.count())
    text = replay("--status", "FAILED", "--from-failed-step", "--dry-run", "--reason", "x")
    assert "dry run: 3 runs would be replayed" in text
    assert (Run.objects.count(), Checkpoint.objects.count(), Event.objects.count()) == counts


def test_its_dry_run_lists_each_reused_side_effect_and_each_that_may_repeat(actors):
    run = lifecycle.start_run("dim_lights", thread_id="S", input={"request": "lower it by 10%"})
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "SUCCEEDED"
    [set_op] = Operation.objects.filter(run=run, side_effect="unsafe")
    recorded = json.dumps(set_op.result)

    lines = replay(str(run.pk), "--dry-run", "--reason", "look").splitlines()
    assert lines[2:] == [
        "side effects reused (recorded results, not called again):",
        f"  set_brightness: {set_op.tool} -> {recorded}",
        "side effects that may repeat: none",
    ]
    lines = replay(str(run.pk), "--dry-run", "--reexecute", "--reason", "look").splitlines()
    assert lines[2:] == [
        "side effects reused: none",
        "side effects that may repeat (new idempotency keys):",
        f"  set_brightness: {set_op.tool} (unsafe, was SUCCEEDED)",
    ]
    assert not run.replays.exists()
