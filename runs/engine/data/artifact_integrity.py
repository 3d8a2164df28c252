"""Integrity of artifacts against their files (``python manage.py artifacts check``).

Finds Artifact rows whose file is missing or whose sha256 differs (and pauses each
affected non-terminal run with an ``artifact_invalid`` takeover, so no step goes on with
garbage), and orphan files no row refers to (left by a crash between the file write and
the row commit). Orphans older than the grace period are deleted with ``repair``;
younger ones may belong to a worker about to commit its row.
"""

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.files.storage import default_storage
from django.utils import timezone

from runs.engine.control.takeovers import open_takeover
from runs.engine.data import artifact_files
from runs.engine.state.gateway import run_transaction
from runs.models import Artifact
from runs.states import RUN_TERMINAL, RunStatus


@dataclass
class CheckReport:
    """``invalid``: ``[{artifact_id, run_id, run_status, step, step_id, name, uri,
    problem: "missing"|"corrupt", checksum, actual_checksum}]``; ``paused``: run ids
    paused now; ``orphans``: ``[{uri, age_s, deleted}]`` past the grace period;
    ``recent_orphans``: unreferenced files still within it; ``checked``: rows checked."""

    checked: int = 0
    invalid: list[dict[str, Any]] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    orphans: list[dict[str, Any]] = field(default_factory=list)
    recent_orphans: int = 0

    @property
    def ok(self) -> bool:
        """No row points at a missing or corrupt file."""
        return not self.invalid

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "invalid": self.invalid,
            "paused": self.paused,
            "orphans": self.orphans,
            "recent_orphans": self.recent_orphans,
        }


def check_artifacts(
    *, repair: bool = False, grace_seconds: float | None = None, actor: str = "cli", storage=None
) -> CheckReport:
    """Check every artifact row and every stored file; see the module docstring.

    ``grace_seconds`` defaults to ``AGENTOPS_ORPHAN_GRACE_SECONDS``; orphan age is
    measured against the storage's modification time.
    """
    storage = storage or default_storage
    grace = settings.AGENTOPS_ORPHAN_GRACE_SECONDS if grace_seconds is None else grace_seconds
    report = CheckReport()
    # Files first, rows second: a row committed in between then counts as referenced,
    # so a worker's fresh file is never mistaken for an orphan by this ordering.
    files = artifact_files.walk(storage)
    rows = list(Artifact.objects.select_related("run", "step").order_by("pk"))
    report.checked = len(rows)
    for artifact in rows:
        found = artifact_files.file_digest(artifact.uri, storage)
        if found is not None and found[0] == artifact.checksum:
            continue
        report.invalid.append(
            {
                "artifact_id": artifact.pk,
                "run_id": str(artifact.run_id),
                "run_status": artifact.run.status,
                "step": artifact.step.name if artifact.step else None,
                "step_id": artifact.step_id,
                "name": artifact.name,
                "uri": artifact.uri,
                "problem": "missing" if found is None else "corrupt",
                "checksum": artifact.checksum,
                "actual_checksum": found[0] if found else None,
            }
        )
    for run_id in dict.fromkeys(i["run_id"] for i in report.invalid):
        if _pause(run_id, [i for i in report.invalid if i["run_id"] == run_id], actor):
            report.paused.append(run_id)
    referenced = {a.uri for a in rows}
    now = timezone.now()
    for uri in files:
        if uri in referenced:
            continue
        age = (now - artifact_files.modified_at(uri, storage)).total_seconds()
        if age < grace:
            report.recent_orphans += 1
            continue
        deleted = False
        if repair and not Artifact.objects.filter(uri=uri).exists():
            storage.delete(uri)
            deleted = True
        report.orphans.append({"uri": uri, "age_s": round(age, 1), "deleted": deleted})
    return report


def _pause(run_id: str, problems: list[dict[str, Any]], actor: str) -> bool:
    """Pause a non-terminal run with an ``artifact_invalid`` takeover; ``False`` if it is
    terminal, already paused, or cancelling (a cancel finishes on its own)."""
    with run_transaction(run_id) as tx:
        if tx.run.status in RUN_TERMINAL or tx.run.status in (
            RunStatus.PAUSED,
            RunStatus.CANCEL_REQUESTED,
        ):
            return False
        first = problems[0]
        step = None
        if first["step_id"]:
            from runs.models import Step

            step = Step.objects.filter(pk=first["step_id"]).first()
        names = ", ".join(f"{p['name']} ({p['problem']})" for p in problems)
        return (
            open_takeover(
                tx,
                cause="artifact_invalid",
                reason=f"artifact file check failed: {names}",
                actor=actor,
                step=step,
                suggested_action="Restore the files from a backup (or re-run the step that "
                "wrote them from an earlier checkpoint), then resume.",
                evidence={"artifacts": problems},
            )
            is not None
        )
