"""Retention: what is kept of a finished run once it is older than the retention period.

``prune(older_than_days)`` takes the terminal runs that finished more than that many
days ago and were not pruned yet, and for each, in one transaction:

- removes its payloads: the ``Payload`` rows (large tool outputs), step outputs and
  ledger results (the ledger rows themselves stay: tool, key, status, arguments);
- removes its checkpoints (so it can no longer be resumed or replayed: replays are
  possible while a run is within retention);
- removes its artifacts, files first, then rows;
- compacts its events: the events of people (``user:...`` and ``cli`` actors, the audit
  log) and the run's own status changes (``run.*``) stay, the rest go (the event seqs of
  a pruned run have gaps), and one ``run.pruned`` event records what was removed.

Threads, messages, approvals, takeovers and refused-action records are kept.
"""

import logging
from dataclasses import asdict, dataclass, field
from datetime import timedelta

from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Q, Sum

from runs.engine.state.clock import db_now
from runs.engine.state.gateway import record_event
from runs.models import Artifact, Checkpoint, Event, Operation, Payload, Run, Step
from runs.states import RUN_TERMINAL

logger = logging.getLogger("agentops.retention")

PRUNED_EVENT = "run.pruned"


@dataclass
class PruneReport:
    """What a prune removed (or, with ``dry_run``, would remove); bytes are UTF-8 text
    bytes for payloads and file sizes for artifacts."""

    older_than_days: float
    dry_run: bool
    runs: int = 0
    payloads: int = 0
    payload_bytes: int = 0
    step_outputs: int = 0
    ledger_results: int = 0
    checkpoints: int = 0
    artifacts: int = 0
    artifact_bytes: int = 0
    events_removed: int = 0
    run_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def prunable_runs(older_than_days: float):
    """Terminal runs finished more than ``older_than_days`` days ago (database clock),
    not pruned yet, oldest first."""
    cutoff = db_now() - timedelta(days=older_than_days)
    return (
        Run.objects.filter(status__in=RUN_TERMINAL, finished_at__lt=cutoff)
        .exclude(events__type=PRUNED_EVENT)
        .order_by("finished_at", "pk")
    )


def _compacted_events(run_id):
    """The events of ``run_id`` that compaction removes."""
    kept = Q(actor__startswith="user:") | Q(actor="cli") | Q(type__startswith="run.")
    return Event.objects.filter(run_id=run_id).exclude(kept)


def prune(older_than_days: float, *, dry_run: bool = False, actor: str = "cli") -> PruneReport:
    """Apply the retention policy (module docstring) to every prunable run; returns the
    report. Raises ``ValueError`` for a negative ``older_than_days``."""
    if older_than_days < 0:
        raise ValueError("older_than_days must be >= 0")
    report = PruneReport(older_than_days=older_than_days, dry_run=dry_run)
    for run_id in list(prunable_runs(older_than_days).values_list("pk", flat=True)):
        _prune_run(run_id, report, dry_run=dry_run, actor=actor)
    return report


def _prune_run(run_id, report: PruneReport, *, dry_run: bool, actor: str) -> None:
    payloads = Payload.objects.filter(run_id=run_id)
    outputs = Step.objects.filter(run_id=run_id, output__isnull=False)
    results = Operation.objects.filter(run_id=run_id, result__isnull=False)
    checkpoints = Checkpoint.objects.filter(run_id=run_id)
    artifacts = Artifact.objects.filter(run_id=run_id)
    events = _compacted_events(run_id)
    counts = {
        "payloads": payloads.count(),
        "payload_bytes": payloads.aggregate(n=Sum("size"))["n"] or 0,
        "step_outputs": outputs.count(),
        "ledger_results": results.count(),
        "checkpoints": checkpoints.count(),
        "artifacts": artifacts.count(),
        "artifact_bytes": artifacts.aggregate(n=Sum("size"))["n"] or 0,
        "events_removed": events.count(),
    }
    report.runs += 1
    report.run_ids.append(str(run_id))
    for key, value in counts.items():
        setattr(report, key, getattr(report, key) + value)
    if dry_run:
        return
    uris = list(artifacts.values_list("uri", flat=True))
    for uri in uris:
        # Files first: a crash between here and the commit leaves rows whose files are
        # gone, which the next prune (or `artifacts check`) finds; never the reverse.
        try:
            default_storage.delete(uri)
        except OSError:
            logger.warning("could not delete artifact file %s of run %s", uri, run_id)
    with transaction.atomic():
        outputs.update(output=None)
        results.update(result=None)
        checkpoints.delete()
        artifacts.delete()
        payloads.delete()
        events.delete()
        record_event(run_id, PRUNED_EVENT, counts, actor=actor, progress=False)
