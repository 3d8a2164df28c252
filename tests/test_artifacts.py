"""Artifacts: written file first then row with a sha256; reading verifies it.
A corrupted or missing report.md pauses the run with a takeover before publish, and the
publisher is never called."""

import hashlib
import json

import pytest

from tests.support.deployment_runs import facts, make_user, status, weekly_input


def run_to_approval(d):
    make_user(d, "alice", approver=True)
    run_id = d.call(
        "runs", "start", "weekly_report", "--thread", "A", "--input", weekly_input()
    ).strip()
    d.manage("worker", "--burst", timeout=120, check=True)
    info = facts(d, run_id)
    assert info["run"]["status"] == "WAITING_APPROVAL"
    return run_id, info


def test_it_stores_artifacts_with_their_checksums(deployment_factory):
    d = deployment_factory("sqlite")
    run_id, info = run_to_approval(d)
    by_name = {a["name"]: a for a in info["artifacts"]}
    for artifact in by_name.values():
        assert artifact["step__name"] == "draft_report"
        raw = (d.var_dir / "artifacts" / artifact["uri"]).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == artifact["checksum"]
        assert len(raw) == artifact["size"]
    sources = json.loads((d.var_dir / "artifacts" / by_name["sources.json"]["uri"]).read_text())
    assert len(sources) == 6  # two duplicates dropped by deduplicate


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_a_damaged_report_pauses_the_run_before_publish(deployment_factory, damage):
    d = deployment_factory("sqlite")
    run_id, info = run_to_approval(d)
    report = next(a for a in info["artifacts"] if a["name"] == "report.md")
    path = d.var_dir / "artifacts" / report["uri"]
    if damage == "corrupt":
        path.write_bytes(path.read_bytes().replace(b"Weekly", b"Weakly"))
    else:
        path.unlink()

    approval = info["approvals"][0]["pk"]
    d.manage("approvals", "decide", approval, "approve", "--as", "alice", check=True)
    worker = d.manage("worker", "--burst", timeout=120, check=True)
    assert "ENTER publish" in worker.stdout

    after = facts(d, run_id)
    assert after["run"]["status"] == "PAUSED"
    assert "publisher.publish" not in status(d, run_id)["calls"]
    [takeover] = after["takeovers"]
    assert takeover["cause"] == "artifact_invalid" and takeover["failed_at"] == "publish"
    expected = "checksum_mismatch" if damage == "corrupt" else "missing"
    assert takeover["evidence"]["problem"] == expected
    assert takeover["evidence"]["expected_sha256"] == report["checksum"]
    assert "after:analyze" in takeover["suggested_action"]
    publish = [s for s in after["steps"] if s["name"] == "publish"]
    assert [(s["status"], s["error_code"], s["attempt"]) for s in publish] == [
        ("FAILED", "ARTIFACT_INVALID", 1)
    ]

    # The operator re-drafts from the checkpoint before draft_report; then it publishes.
    d.manage(
        "approvals",
        "resolve",
        takeover["pk"],
        "resume",
        "--checkpoint",
        "after:analyze",
        "--reason",
        "re-draft the damaged report",
        check=True,
    )
    d.manage("worker", "--burst", timeout=120, check=True)
    pending = d.manage_json("approvals", "list", "--json")
    d.manage("approvals", "decide", pending[0]["id"], "approve", "--as", "alice", check=True)
    d.manage("worker", "--burst", timeout=120, check=True)
    final = status(d, run_id)
    assert final["status"] == "SUCCEEDED" and final["calls"]["publisher.publish"] == 1
