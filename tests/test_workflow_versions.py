"""Workflow versions: a worker running code that does not know a run's
version pauses it with an unknown_workflow_version takeover and never restarts it; once
the code knows the version, resolving the takeover continues the run where it stopped.
A registered migration upgrades an old run's checkpoint instead."""

from tests.support.deployment_runs import events_of, facts, start_with_command, status

OLD = {"AGENTOPS_EXTRA_WORKFLOW_MODULES": "tests.workflows.versioned_v1"}
NEW = {
    "AGENTOPS_EXTRA_WORKFLOW_MODULES": "tests.workflows.versioned_v1,tests.workflows.versioned_v3"
}
V2_ONLY = {"AGENTOPS_EXTRA_WORKFLOW_MODULES": "tests.workflows.versioned_v2"}


def test_an_unknown_version_pauses_and_continues_after_the_code_knows_it(deployment_factory):
    d = deployment_factory("sqlite", NEW)
    run_id = start_with_command(d, "versioned", "V", '{"label": "x"}', "--crash-before", "second")
    crashed = d.manage("worker", "--burst", timeout=120)
    assert crashed.returncode == 75 and "ENTER first" in crashed.stdout
    assert status(d, run_id)["version"] == 3

    d.env.update(OLD)  # a worker of the old deployment reaches the run
    old = d.manage("worker", "--burst", timeout=120, check=True)
    assert "ENTER" not in old.stdout
    info = facts(d, run_id)
    assert info["run"]["status"] == "PAUSED"
    [takeover] = info["takeovers"]
    assert takeover["cause"] == "unknown_workflow_version" and takeover["status"] == "OPEN"
    assert takeover["failed_at"] == "second"
    assert takeover["evidence"]["version"] == 3 and takeover["evidence"]["versions_known_here"] == [
        1
    ]
    assert takeover["done_summary"]["completed_steps"] == ["first"]
    assert "after:first" in takeover["checkpoints"]
    assert [(s["name"], s["status"]) for s in info["steps"]] == [
        ("first", "SUCCEEDED"),
        ("second", "PENDING"),
    ]
    listed = d.manage_json("approvals", "takeovers", "--json")
    assert [t["id"] for t in listed] == [takeover["pk"]]

    refused = d.manage("approvals", "resolve", takeover["pk"], "resume", "--reason", "deployed?")
    assert refused.returncode != 0 and "unknown_workflow_version" in refused.stderr

    d.env.update(NEW)  # the new code is deployed everywhere
    out = d.manage(
        "approvals", "resolve", takeover["pk"], "resume", "--reason", "v3 deployed", check=True
    ).stdout
    assert "RESOLVED (resume); run is RUNNING" in out
    after = d.manage("worker", "--burst", timeout=120, check=True)
    assert "ENTER second" in after.stdout and "ENTER first" not in after.stdout

    info = facts(d, run_id)
    assert info["run"]["status"] == "SUCCEEDED"
    assert [s["name"] for s in info["steps"]] == ["first", "second", "third"]
    [resolved] = events_of(info, "takeover.resolved")
    assert resolved["actor"] == "cli" and resolved["payload"]["reason"] == "v3 deployed"
    assert resolved["payload"]["action"] == "resume"


def test_a_registered_migration_upgrades_an_old_run(deployment_factory):
    d = deployment_factory("sqlite", OLD)
    run_id = start_with_command(d, "versioned", "M", '{"label": "y"}', "--crash-before", "second")
    assert d.manage("worker", "--burst", timeout=120).returncode == 75

    d.env.update(V2_ONLY)
    new = d.manage("worker", "--burst", timeout=120, check=True)
    assert "ENTER second" in new.stdout and "ENTER first" not in new.stdout
    info = facts(d, run_id)
    assert info["run"]["status"] == "SUCCEEDED" and info["run"]["workflow_version"] == 2
    [migrated] = events_of(info, "workflow.migrated")
    assert migrated["payload"]["from_version"] == 1 and migrated["payload"]["to_version"] == 2
    third = info["steps"][-1]
    assert third["output"] == {
        "version": 2,
        "first": {"version": 1, "label": "y", "migrated_from": 1},
    }
    assert not info["takeovers"]
