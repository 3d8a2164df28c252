"""``manage.py prune --older-than DAYS [--dry-run]``: the retention policy for finished
runs: payloads, checkpoints and artifacts go, events are compacted, the audit stays, and
runs within retention can still be replayed."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.management import CommandError, call_command

from runs.engine.control.lifecycle import start_run
from runs.engine.control.replay import plan_replay
from runs.engine.state.clock import db_now
from runs.engine.state.gateway import record_event
from runs.models import Artifact, Checkpoint, Event, Operation, Payload, Run, Step

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def finished_runs(loop_workflow, settings, tmp_path):
    """Two finished 20-turn runs with an artifact and an operator event each; the first
    finished ten days ago."""
    from tests.support.in_process import run_worker_in_process

    settings.MEDIA_ROOT = tmp_path / "artifacts"
    runs = [start_run("storage_loop", thread_id=f"p{i}", input={}, actor="test") for i in range(2)]
    run_worker_in_process()
    for run in runs:
        step = Step.objects.filter(run=run).first()
        uri = default_storage.save(f"{run.pk}/notes.txt", ContentFile(b"x" * 1000))
        Artifact.objects.create(
            run=run, step=step, kind="file", name="notes.txt", uri=uri, checksum="0" * 64, size=1000
        )
        record_event(run.pk, "run.note", {"reason": "looked at it"}, actor="user:bob")
    Run.objects.filter(pk=runs[0].pk).update(finished_at=db_now() - timedelta(days=10))
    return runs


def prune(*args) -> dict:
    out = StringIO()
    call_command("prune", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_it_reports_without_changing_anything_on_a_dry_run(finished_runs):
    old, recent = finished_runs
    before = Event.objects.count(), Payload.objects.count(), Artifact.objects.count()
    report = prune("--older-than", "7", "--dry-run")
    assert report["run_ids"] == [str(old.pk)] and report["dry_run"] is True
    assert report["payloads"] == 20 and report["payload_bytes"] == 20 * 64 * 1024
    assert report["artifacts"] == 1 and report["artifact_bytes"] == 1000
    assert report["checkpoints"] == Checkpoint.objects.filter(run=old).count() > 0
    assert (Event.objects.count(), Payload.objects.count(), Artifact.objects.count()) == before


def test_it_prunes_runs_past_retention_and_keeps_the_audit(finished_runs):
    old, recent = finished_runs
    uri = Artifact.objects.get(run=old).uri
    report = prune("--older-than", "7")
    assert report["run_ids"] == [str(old.pk)]
    assert not Payload.objects.filter(run=old).exists()
    assert not Checkpoint.objects.filter(run=old).exists()
    assert not Artifact.objects.filter(run=old).exists() and not default_storage.exists(uri)
    assert not Step.objects.filter(run=old, output__isnull=False).exists()
    assert not Operation.objects.filter(run=old, result__isnull=False).exists()
    assert Operation.objects.filter(run=old).count() == 20  # the ledger rows stay
    kinds = set(Event.objects.filter(run=old).values_list("type", flat=True))
    assert "run.note" in kinds and "run.succeeded" in kinds and "run.pruned" in kinds
    assert not any(k.startswith(("step.", "checkpoint.")) for k in kinds)
    # The recent run is untouched and can still be replayed; the old one cannot.
    assert Payload.objects.filter(run=recent).count() == 20
    assert plan_replay(recent).checkpoint.run_id == recent.pk
    # Pruning again finds nothing new.
    assert prune("--older-than", "7")["runs"] == 0


def test_it_refuses_a_bad_number_of_days():
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(CommandError):
            call_command("prune", "--older-than", bad, stdout=StringIO())
