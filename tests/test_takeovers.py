"""Takeover resolutions on a weekly_report run paused by a corrupted report:
claim, retry, mark done with evidence, cancel; each resolution is an event with actor
and reason."""

from tests.support.deployment_runs import (
    events_of,
    facts,
    make_user,
    shell_json,
    start_with_command,
    status,
    weekly_input,
)


def paused_run(d):
    """A weekly_report run approved for publishing whose report.md was corrupted, so
    publish paused it. Returns ``(run_id, takeover_id, report path, original bytes)``."""
    make_user(d, "alice", approver=True)
    shell_json(
        d,
        """
from django.contrib.auth.models import User
User.objects.create_superuser("ops", "ops@example.com", "pw")
User.objects.create_superuser("ops2", "ops2@example.com", "pw")
print(json.dumps(True))
""",
    )
    run_id = start_with_command(d, "weekly_report", "T", weekly_input())
    d.manage("worker", "--burst", timeout=120, check=True)
    info = facts(d, run_id)
    report = next(a for a in info["artifacts"] if a["name"] == "report.md")
    path = d.var_dir / "artifacts" / report["uri"]
    original = path.read_bytes()
    path.write_bytes(original + b"\ninjected line\n")
    d.manage(
        "approvals", "decide", info["approvals"][0]["pk"], "approve", "--as", "alice", check=True
    )
    d.manage("worker", "--burst", timeout=120, check=True)
    [takeover] = d.manage_json("approvals", "takeovers", "--json")
    assert takeover["cause"] == "artifact_invalid" and status(d, run_id)["status"] == "PAUSED"
    return run_id, takeover["id"], path, original


def test_claim_then_retry_after_the_file_is_restored(deployment_factory):
    d = deployment_factory("sqlite")
    run_id, takeover_id, path, original = paused_run(d)
    make_user(d, "charlie")
    refused = d.manage("approvals", "claim", takeover_id, "--as", "charlie")
    assert refused.returncode != 0 and "permission_denied" in refused.stderr
    d.manage("approvals", "claim", takeover_id, "--as", "ops", check=True)
    d.manage("approvals", "claim", takeover_id, "--as", "ops", check=True)  # again: no-op
    taken = d.manage("approvals", "claim", takeover_id, "--as", "ops2")
    assert taken.returncode != 0 and "already_claimed" in taken.stderr

    path.write_bytes(original)
    d.manage(
        "approvals",
        "resolve",
        takeover_id,
        "retry",
        "--reason",
        "restored from backup",
        "--as",
        "ops",
        check=True,
    )
    d.manage("worker", "--burst", timeout=120, check=True)

    final = status(d, run_id)
    assert final["status"] == "SUCCEEDED" and final["calls"]["publisher.publish"] == 1
    info = facts(d, run_id)
    assert [(s["status"]) for s in info["steps"] if s["name"] == "publish"] == [
        "FAILED",
        "SUCCEEDED",
    ]
    [claimed] = events_of(info, "takeover.claimed")
    assert claimed["actor"] == "user:ops"
    [resolved] = events_of(info, "takeover.resolved")
    assert resolved["actor"] == "user:ops" and resolved["payload"]["action"] == "retry"
    assert resolved["payload"]["reason"] == "restored from backup"
    assert info["takeovers"][0]["status"] == "RESOLVED"
    assert info["takeovers"][0]["resolved_by"] == "user:ops"


def test_mark_done_needs_evidence_and_continues_without_calling_the_step(deployment_factory):
    d = deployment_factory("sqlite")
    run_id, takeover_id, _, _ = paused_run(d)
    missing = d.manage("approvals", "resolve", takeover_id, "mark_done", "--reason", "by hand")
    assert missing.returncode != 0 and "evidence_required" in missing.stderr
    d.manage(
        "approvals",
        "resolve",
        takeover_id,
        "mark_done",
        "--reason",
        "published by hand",
        "--evidence",
        "ticket OPS-12",
        "--result",
        '{"published": true, "manual": true}',
        check=True,
    )
    final = status(d, run_id)
    assert final["status"] == "SUCCEEDED" and "publisher.publish" not in final["calls"]
    info = facts(d, run_id)
    done = [s for s in info["steps"] if s["name"] == "publish"][-1]
    assert done["status"] == "SUCCEEDED" and done["output"] == {"published": True, "manual": True}
    [marked] = events_of(info, "step.marked_done")
    assert marked["payload"]["evidence"] == "ticket OPS-12" and marked["actor"] == "cli"


def test_cancel_resolution_from_paused_compensates(deployment_factory):
    d = deployment_factory("sqlite")
    run_id, takeover_id, _, _ = paused_run(d)
    d.manage(
        "approvals", "resolve", takeover_id, "cancel", "--reason", "give up this week", check=True
    )
    final = status(d, run_id)
    assert final["status"] == "CANCELLED"
    assert final["calls"]["publisher.release"] == 1 and "publisher.publish" not in final["calls"]
    info = facts(d, run_id)
    [resolved] = events_of(info, "takeover.resolved")
    assert resolved["payload"] == {
        "action": "cancel",
        "reason": "give up this week",
        "evidence": "",
        "checkpoint": None,
        "takeover_id": takeover_id,
    }
    again = d.manage("approvals", "resolve", takeover_id, "resume", "--reason", "x")
    assert again.returncode != 0 and "takeover_resolved" in again.stderr


def test_an_operator_pause_opens_a_takeover_and_resume_continues(deployment_factory):
    d = deployment_factory("sqlite")
    run_id = start_with_command(d, "weekly_report", "P", weekly_input())
    missing = d.manage("runs", "pause", run_id, "--reason", " ")
    assert missing.returncode != 0 and "reason_required" in missing.stderr
    d.manage("runs", "pause", run_id, "--reason", "check the sources first", check=True)
    idle = d.manage("worker", "--burst", timeout=120, check=True)
    assert "ENTER" not in idle.stdout

    [takeover] = d.manage_json("approvals", "takeovers", "--json")
    assert takeover["cause"] == "operator_request" and takeover["failed_at"] == "collect_sources"
    assert takeover["evidence"] == {"requested_by": "cli"}
    d.manage(
        "approvals", "resolve", takeover["id"], "resume", "--reason", "sources are fine", check=True
    )
    d.manage("worker", "--burst", timeout=120, check=True)
    assert status(d, run_id)["status"] == "WAITING_APPROVAL"
    # WAITING_APPROVAL -> PAUSED is in the table, so the command allows it too.
    d.manage("runs", "pause", run_id, "--reason", "legal wants a look", check=True)
    again = d.manage("runs", "pause", run_id, "--reason", "paused already")
    assert again.returncode != 0 and "not_allowed_in_state" in again.stderr
