"""Artifact integrity: the file first, then the row; ``artifacts check`` finds rows
whose file is missing or corrupt (pausing non-terminal runs) and orphan files, and
``--repair`` deletes orphans once past the grace period."""

import json

import pytest

from tests.support.deployment_runs import shell_json, start_on_thread, status
from tests.support.services import BACKENDS

ARTIFACTS = """
import json
from runs.models import Artifact
print(json.dumps([[a.uri, a.checksum, a.step.name, a.step.attempt]
                  for a in Artifact.objects.order_by("pk")]))
"""


def check(deployment, *args):
    proc = deployment.manage("artifacts", "check", "--json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def stored_files(deployment):
    root = deployment.var_dir / "artifacts"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_leaves_an_orphan_file_never_a_dangling_row_when_killed_between_file_and_row(
    deployment_factory, backend
):
    deployment = deployment_factory(backend, extra_env={"AGENTOPS_LEASE_SECONDS": 2})
    run_id = start_on_thread(
        deployment, "chat", "a", {"message": "How warm is it?"}, "--crash-at", "artifact_written"
    )
    killed = deployment.manage("worker", "--burst", "--mode", "db", timeout=120)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert "CRASH at artifact_written in reply" in killed.stdout

    orphan = stored_files(deployment)
    assert len(orphan) == 1 and orphan[0].endswith("answer.md")
    assert shell_json(deployment, ARTIFACTS) == []  # no row points at anything
    code, report = check(deployment, "--repair")
    assert code == 0 and report["ok"] and report["invalid"] == []
    assert report["recent_orphans"] == 1 and report["orphans"] == []  # within the grace period
    assert stored_files(deployment) == orphan

    code, report = check(deployment, "--repair", "--grace", "0")
    assert code == 0
    assert report["orphans"] == [
        {"uri": orphan[0], "age_s": report["orphans"][0]["age_s"], "deleted": True}
    ]
    assert stored_files(deployment) == []

    deployment.manage("runs", "resume", run_id, "--wait", "30", check=True)
    deployment.manage("worker", "--burst", "--mode", "db", check=True, timeout=120)
    assert status(deployment, run_id)["status"] == "SUCCEEDED"
    [[uri, _checksum, step, attempt]] = shell_json(deployment, ARTIFACTS)
    assert (step, attempt) == ("reply", 2) and stored_files(deployment) == [uri]
    code, report = check(deployment)
    assert code == 0 and report == {
        "ok": True,
        "checked": 1,
        "invalid": [],
        "paused": [],
        "orphans": [],
        "recent_orphans": 0,
    }


def test_it_reports_a_corrupt_file_by_run_and_step_and_pauses_a_live_run_for_a_missing_one(
    deployment_factory,
):
    deployment = deployment_factory("sqlite")
    done = start_on_thread(deployment, "chat", "c", {"message": "How warm is it?"})
    deployment.manage("worker", "--burst", check=True, timeout=120)
    [[uri, checksum, _step, _attempt]] = shell_json(deployment, ARTIFACTS)
    (deployment.var_dir / "artifacts" / uri).write_text("garbage")

    # A live run (not started yet) whose artifact row points at a file that is gone.
    live = start_on_thread(deployment, "chat", "d", {"message": "How warm is it now?"})
    shell_json(
        deployment,
        f"""
from runs.models import Artifact, Step
step = Step.objects.get(run_id={live!r}, name="summarize")
Artifact.objects.create(run_id={live!r}, step=step, kind="file", name="notes.md",
                        uri="runs/{live}/gone/notes.md", checksum="0" * 64, size=3)
print(1)
""",
    )
    code, report = check(deployment)
    assert code == 1 and not report["ok"]
    by_run = {i["run_id"]: i for i in report["invalid"]}
    assert by_run[done]["problem"] == "corrupt" and by_run[done]["step"] == "reply"
    assert by_run[done]["checksum"] == checksum and by_run[done]["run_status"] == "SUCCEEDED"
    assert by_run[live]["problem"] == "missing" and by_run[live]["step"] == "summarize"
    assert report["paused"] == [live]  # the terminal run stays as it is
    assert status(deployment, live)["status"] == "PAUSED"
    assert status(deployment, done)["status"] == "SUCCEEDED"
    cause = shell_json(
        deployment,
        f"""
from runs.models import Takeover
import json
t = Takeover.objects.get(run_id={live!r}, status="OPEN")
print(json.dumps([t.cause, t.evidence["artifacts"][0]["name"]]))
""",
    )
    assert cause == ["artifact_invalid", "notes.md"]

    text = deployment.manage("artifacts", "check")
    assert text.returncode == 1
    assert f"CORRUPT: answer.md ({uri}) of run {done} step reply" in text.stdout
    # A second check pauses nothing new (the run is already paused).
    assert check(deployment)[1]["paused"] == []
