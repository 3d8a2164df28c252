"""Approvals: the weekly_report run waits for a person with no worker holding
anything, continues on approve or takes the reject path, decides once under
concurrency, and refuses people without the approver permission. Real worker
subprocesses on SQLite (database polling) and PostgreSQL + Redis (RQ)."""

import pytest

from tests.support.deployment_runs import (
    attempt_facts,
    events_of,
    facts,
    make_user,
    status,
    weekly_input,
)
from tests.support.services import BACKENDS


def start_and_wait(d, thread="R"):
    argv = ("runs", "start", "weekly_report", "--thread", thread, "--input", weekly_input())
    run_id = d.call(*argv).strip()
    d.manage("worker", "--burst", timeout=180, check=True)
    return run_id


def pending_approval(d) -> dict:
    rows = d.manage_json("approvals", "list", "--json")
    assert len(rows) == 1, rows
    return rows[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_waits_with_no_worker_and_a_new_worker_publishes_after_approve(
    deployment_factory, backend
):
    d = deployment_factory(backend, {"AGENTOPS_LEASE_SECONDS": 2})
    make_user(d, "alice", approver=True)
    run_id = start_and_wait(d)

    info = facts(d, run_id)
    assert info["run"]["status"] == "WAITING_APPROVAL"
    waiting = [s for s in info["steps"] if s["name"] == "approve_publication"]
    assert [(s["status"], s["owner"], s["lease_until"]) for s in waiting] == [("WAITING", "", None)]
    assert not [s for s in info["steps"] if s["status"] == "RUNNING"]
    assert sorted(a["name"] for a in info["artifacts"]) == ["report.md", "sources.json"]
    approval = pending_approval(d)
    assert approval["step"] == "approve_publication" and approval["status"] == "PENDING"
    assert {a["name"] for a in approval["evidence"]["artifacts"]} == {"report.md", "sources.json"}
    assert "# Weekly report 2026-W48" in approval["evidence"]["report_excerpt"]
    assert "publisher.publish" not in status(d, run_id)["calls"]

    # Nobody works while the run waits: a worker pass finds nothing to do.
    idle = d.manage("worker", "--burst", timeout=120, check=True)
    assert "ENTER" not in idle.stdout

    decided = d.manage(
        "approvals",
        "decide",
        approval["id"],
        "approve",
        "--comment",
        "ship it",
        "--as",
        "alice",
        check=True,
    )
    assert "APPROVED by alice" in decided.stdout
    after = d.manage("worker", "--burst", timeout=180, check=True)
    assert "ENTER publish" in after.stdout and "ENTER collect_sources" not in after.stdout

    final = status(d, run_id)
    assert final["status"] == "SUCCEEDED"
    assert final["calls"]["publisher.publish"] == 1
    info = facts(d, run_id)
    [approved] = events_of(info, "approval.approved")
    assert approved["actor"] == "user:alice" and approved["payload"]["comment"] == "ship it"
    step = next(s for s in info["steps"] if s["name"] == "approve_publication")
    assert step["output"] == {"decision": "approved", "by": "alice", "comment": "ship it"}
    # The step's one attempt waited for the approval; it is not shown as running.
    shown = attempt_facts(d, run_id)
    (waited,) = shown["api"]["approve_publication"]
    assert (waited["result"], waited["outcome"]) == ("waited", "step.waiting")
    assert shown["bars"]["approve_publication"] == ["asked"]


def test_it_takes_the_reject_path_and_never_publishes(deployment_factory):
    d = deployment_factory("sqlite")
    make_user(d, "alice", approver=True)
    run_id = start_and_wait(d)
    approval = pending_approval(d)
    d.manage(
        "approvals",
        "decide",
        approval["id"],
        "reject",
        "--comment",
        "too thin",
        "--as",
        "alice",
        check=True,
    )
    d.manage("worker", "--burst", timeout=120, check=True)

    final = status(d, run_id)
    assert final["status"] == "SUCCEEDED"
    assert [s["name"] for s in final["steps"]][-2:] == ["approve_publication", "shelve_draft"]
    assert "publisher.publish" not in final["calls"]
    assert final["calls"]["publisher.release"] == 1
    shelve = next(s for s in facts(d, run_id)["steps"] if s["name"] == "shelve_draft")
    assert shelve["output"]["published"] is False and shelve["output"]["decision"] == "rejected"


def test_two_concurrent_approvals_make_one_decision(deployment_factory):
    d = deployment_factory("postgres")
    make_user(d, "alice", approver=True)
    make_user(d, "bob", approver=True)
    run_id = start_and_wait(d)
    approval = pending_approval(d)

    procs = [
        d.popen("approvals", "decide", approval["id"], "approve", "--comment", who, "--as", who)
        for who in ("alice", "bob")
    ]
    codes = [p.wait(timeout=120) for p in procs]
    assert codes == [0, 0], [d.logs(p) for p in procs]

    info = facts(d, run_id)
    assert len(events_of(info, "approval.approved")) == 1
    assert len([s for s in info["steps"] if s["name"] == "publish"]) == 1
    [row] = info["approvals"]
    assert row["status"] == "APPROVED" and row["decided_by__username"] in ("alice", "bob")
    assert row["comment"] == row["decided_by__username"]

    conflict = d.manage("approvals", "decide", approval["id"], "reject", "--as", "alice")
    assert conflict.returncode != 0 and "decision_conflict" in conflict.stderr
    assert "already APPROVED" in conflict.stderr


def test_it_refuses_a_decision_without_the_approver_permission(deployment_factory):
    d = deployment_factory("sqlite")
    make_user(d, "charlie")
    run_id = start_and_wait(d)
    approval = pending_approval(d)

    refused = d.manage("approvals", "decide", approval["id"], "approve", "--as", "charlie")
    assert refused.returncode != 0 and "permission_denied" in refused.stderr
    unknown = d.manage("approvals", "decide", approval["id"], "approve", "--as", "nobody")
    assert unknown.returncode != 0 and "unknown_user" in unknown.stderr

    info = facts(d, run_id)
    assert info["run"]["status"] == "WAITING_APPROVAL"
    assert info["approvals"][0]["status"] == "PENDING"
    assert not events_of(info, "approval.approved")


def test_an_expired_approval_takes_the_expiry_path(deployment_factory):
    d = deployment_factory("sqlite", {"AGENTOPS_APPROVAL_EXPIRY_SECONDS": 1})
    run_id = start_and_wait(d)
    from tests.support.waiting import wait_until

    def expired():
        out = d.manage("sweeper", "--once", check=True).stdout
        return "'approvals_expired': 1" in out

    wait_until(expired, what="the sweeper to expire the approval")
    d.manage("worker", "--burst", timeout=120, check=True)
    final = status(d, run_id)
    assert final["status"] == "SUCCEEDED" and "publisher.publish" not in final["calls"]
    info = facts(d, run_id)
    assert info["approvals"][0]["status"] == "EXPIRED"
    assert [e["actor"].startswith("sweeper:") for e in events_of(info, "approval.expired")] == [
        True
    ]
