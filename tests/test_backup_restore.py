"""Backup during a running workload, restore into a fresh database and folder: every
artifact row's file is there with its checksum, counts match, and the runs that were in
progress resume through startup recovery and finish."""

import io
import json
import random
import tarfile

import pytest

from tests.support.deployment_runs import db_rows, shell_json, start_on_thread, step_status
from tests.support.services import BACKENDS
from tests.support.waiting import wait_until

COUNTS = """
import json
from runs.models import Artifact, Event, Run
print(json.dumps({"runs": Run.objects.count(), "events": Event.objects.count(),
                  "artifacts": Artifact.objects.count(),
                  "statuses": sorted(Run.objects.values_list("status", flat=True))}))
"""

# Leases long enough that a worker starved for a few seconds on a loaded machine keeps
# its held step (a lost one would let it take the third held run): the restored runs'
# leases have run out by the time a worker starts on the target anyway.
ENV = {"AGENTOPS_POLL_SECONDS": 0.1, "AGENTOPS_LEASE_SECONDS": 10, "AGENTOPS_SWEEP_SECONDS": 0.5}


def run_statuses(deployment) -> list[str]:
    """Every run's status, sorted, straight from the database (cheap enough to poll,
    unlike a manage.py process per poll)."""
    return sorted(r[0] for r in db_rows(deployment, "SELECT status FROM runs_run"))


def open_gate(deployment, name):
    gate = deployment.var_dir / "devices" / "gates" / name
    gate.parent.mkdir(parents=True, exist_ok=True)
    gate.touch()


def check_clean(deployment, artifacts):
    proc = deployment.manage("artifacts", "check", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["ok"], report
    assert report["checked"] == artifacts and report["orphans"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_backs_up_during_a_workload_and_restores_runs_that_then_finish(
    deployment_factory, backend, tmp_path
):
    source = deployment_factory(backend, extra_env=ENV)
    quick = [
        start_on_thread(source, "chat", f"b{i}", {"message": f"How warm is room {i}?"})
        for i in range(3)
    ]
    held = [
        start_on_thread(source, "chat", f"h{i}", {"message": f"And room {i}?", "hold": "later"})
        for i in range(3)
    ]
    workers = [source.popen("worker"), source.popen("worker")]
    wait_until(
        lambda: run_statuses(source).count("SUCCEEDED") == 3
        and sum(step_status(source, r, "plan") == "RUNNING" for r in held) == 2,
        what="3 runs done and 2 held in plan",
        procs=tuple(workers),
    )

    archive = tmp_path / "backup.tar"
    summary = source.manage_json("backup", str(archive), "--json", timeout=300)
    for worker in workers:  # held steps never finish on their own: kill, as a crash would
        worker.kill()
        worker.wait(timeout=30)
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    assert manifest["vendor"] == summary["vendor"]
    assert manifest["counts"]["runs"] == 6 and manifest["counts"]["artifacts"] == 3
    assert len(manifest["artifacts"]) == 3

    target = deployment_factory(backend, extra_env=ENV)
    restored = target.manage("restore", str(archive), "--json", check=True, timeout=300)
    assert json.loads(restored.stdout)["counts"] == manifest["counts"]
    # Same code as the backup's: nothing to migrate, and restore says so.
    assert json.loads(restored.stdout)["migrations_pending"] is False
    check_clean(target, 3)
    counts = shell_json(target, COUNTS)
    assert (counts["runs"], counts["events"]) == (
        manifest["counts"]["runs"],
        manifest["counts"]["events"],
    )
    assert counts["statuses"].count("SUCCEEDED") == 3
    assert counts["statuses"].count("RUNNING") == 2  # in progress when the backup was taken
    # Restoring again is refused: the target is no longer empty.
    again = target.manage("restore", str(archive))
    assert again.returncode != 0 and "needs an empty database" in again.stderr

    open_gate(target, "later")
    worker = target.popen("worker")
    wait_until(
        lambda: run_statuses(target) == ["SUCCEEDED"] * 6,
        what="every restored run to finish",
        procs=(worker,),
    )
    worker.terminate()
    worker.wait(timeout=60)
    check_clean(target, 6)
    for run_id in quick + held:
        assert step_status(target, run_id, "reply") == "SUCCEEDED"


def test_it_refuses_an_archive_whose_file_does_not_match_the_manifest(deployment_factory, tmp_path):
    source = deployment_factory("sqlite")
    start_on_thread(source, "chat", "t", {"message": "How warm is it?"})
    source.manage("worker", "--burst", check=True, timeout=120)
    archive = tmp_path / "backup.tar"
    source.manage("backup", str(archive), check=True)
    tampered = tmp_path / "tampered.tar"
    with tarfile.open(archive) as tar, tarfile.open(tampered, "w") as out:
        for member in tar:
            data = tar.extractfile(member).read()
            if member.name.endswith("answer.md"):
                data = data.replace(b"23.5", b"99.9")
            member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    target = deployment_factory("sqlite")
    proc = target.manage("restore", str(tampered))
    assert proc.returncode != 0 and "does not match the manifest" in proc.stderr
    assert shell_json(target, COUNTS)["runs"] == 0


def test_a_file_that_is_not_a_backup_archive_is_refused_in_one_line(deployment_factory, tmp_path):
    no_manifest = io.BytesIO()
    with tarfile.open(fileobj=no_manifest, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("notes.txt"), io.BytesIO(b""))
    files = {
        "garbage.tar": (random.Random(0).randbytes(1000), "(not a tar archive)"),
        "empty.tar": (b"", "(not a tar archive)"),
        "no-manifest.tar": (no_manifest.getvalue(), "manifest.json"),
    }
    target = deployment_factory("sqlite")
    for name, (data, why) in files.items():
        path = tmp_path / name
        path.write_bytes(data)
        proc = target.manage("restore", str(path))
        assert proc.returncode == 1, proc.stderr
        [line] = proc.stderr.splitlines()
        assert line.startswith(f"CommandError: {path}: not a readable backup archive "), line
        assert why in line and line.endswith(" [invalid_archive]"), line
    assert shell_json(target, COUNTS)["runs"] == 0
