"""Resume from a named checkpoint: the dry run names exactly the steps that
then run, nothing before the checkpoint runs again, later steps become SUPERSEDED and
are re-created in a new generation with new idempotency keys."""

import pytest

from tests.support.deployment_runs import (
    events_of,
    facts,
    make_user,
    start_with_command,
    status,
    weekly_input,
)
from tests.support.services import BACKENDS


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_resumes_from_after_deduplicate_with_an_input_patch(deployment_factory, backend):
    d = deployment_factory(backend)
    make_user(d, "alice", approver=True)
    run_id = start_with_command(d, "weekly_report", "R", weekly_input())
    d.manage("worker", "--burst", timeout=180, check=True)
    assert status(d, run_id)["status"] == "WAITING_APPROVAL"

    listed = d.manage_json("runs", "checkpoints", run_id, "--json")
    assert [c["name"] for c in listed if c["resumable"]] == [
        "start",
        "after:collect_sources",
        "after:deduplicate",
        "after:analyze",
        "after:draft_report",
    ]

    dry = d.manage_json(
        "runs",
        "resume",
        run_id,
        "--from",
        "after:deduplicate",
        "--input-patch",
        '{"focus": "costs"}',
        "--dry-run",
        "--json",
    )
    assert dry["dry_run"] is True
    assert dry["steps_to_rerun"] == ["analyze", "draft_report", "approve_publication", "publish"]
    assert [s["name"] for s in dry["steps_to_supersede"]] == [
        "analyze",
        "draft_report",
        "approve_publication",
    ]
    assert dry["input"]["focus"] == "costs"
    text = d.manage(
        "runs", "resume", run_id, "--from", "after:deduplicate", "--dry-run", check=True
    ).stdout
    assert "steps that would run again: analyze, draft_report, approve_publication, publish" in text
    before = facts(d, run_id)
    assert before["run"]["generation"] == 1  # the dry run changed nothing
    assert not events_of(before, "run.resumed_from_checkpoint")

    d.manage(
        "runs",
        "resume",
        run_id,
        "--from",
        "after:deduplicate",
        "--input-patch",
        '{"focus": "costs"}',
        "--reason",
        "lead with costs",
        check=True,
    )
    second = d.manage("worker", "--burst", timeout=180, check=True)
    assert "ENTER collect_sources" not in second.stdout
    assert "ENTER deduplicate" not in second.stdout
    approval = d.manage_json("approvals", "list", "--json")
    assert len(approval) == 1 and "costs" in approval[0]["question"]
    d.manage("approvals", "decide", approval[0]["id"], "approve", "--as", "alice", check=True)
    d.manage("worker", "--burst", timeout=180, check=True)

    info = facts(d, run_id)
    final = status(d, run_id)
    assert final["status"] == "SUCCEEDED" and info["run"]["generation"] == 2
    assert final["calls"] == {"newsfeed.fetch": 1, "publisher.publish": 1, "publisher.reserve": 1}
    rows = [(s["name"], s["status"], s["generation"]) for s in info["steps"]]
    assert rows == [
        ("collect_sources", "SUCCEEDED", 1),
        ("deduplicate", "SUCCEEDED", 1),
        ("analyze", "SUPERSEDED", 1),
        ("draft_report", "SUPERSEDED", 1),
        ("approve_publication", "SUPERSEDED", 1),
        ("analyze", "SUCCEEDED", 2),
        ("draft_report", "SUCCEEDED", 2),
        ("approve_publication", "SUCCEEDED", 2),
        ("publish", "SUCCEEDED", 2),
    ]
    assert [n for n, _, g in rows if g == 2] == dry["steps_to_rerun"]
    assert [a["status"] for a in info["approvals"]] == ["CANCELLED", "APPROVED"]
    [resumed] = events_of(info, "run.resumed_from_checkpoint")
    assert resumed["payload"]["input_patch"] == {"focus": "costs"}
    assert resumed["payload"]["reason"] == "lead with costs"
    publish_key = next(
        o["idempotency_key"] for o in info["operations"] if o["tool"] == "publisher.publish"
    )
    assert f"{run_id}:g2:publish:" in publish_key
    # The artifacts of both generations stay; the new report leads with the patched focus.
    reports = [a for a in info["artifacts"] if a["name"] == "report.md"]
    assert len(reports) == 2
    report = (d.var_dir / "artifacts" / reports[-1]["uri"]).read_text()
    assert report.startswith("# Weekly report 2026-W48: costs")


def test_it_refuses_unknown_checkpoints_and_terminal_runs(deployment_factory):
    d = deployment_factory("sqlite")
    run_id = start_with_command(d, "weekly_report", "X", weekly_input())
    d.manage("worker", "--burst", timeout=120, check=True)
    unknown = d.manage("runs", "resume", run_id, "--from", "after:nothing", "--dry-run")
    assert unknown.returncode != 0 and "unknown_checkpoint" in unknown.stderr
    assert "after:deduplicate" in unknown.stderr
    bad = d.manage(
        "runs",
        "resume",
        run_id,
        "--from",
        "start",
        "--input-patch",
        '{"week": ""}',
        "--reason",
        "r",
    )
    assert bad.returncode != 0 and "invalid_input" in bad.stderr
    d.manage("runs", "cancel", run_id, "--reason", "done", check=True)
    terminal = d.manage("runs", "resume", run_id, "--from", "start", "--reason", "r")
    assert terminal.returncode != 0 and "run_terminal" in terminal.stderr
