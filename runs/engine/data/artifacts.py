"""Artifacts: durable step outputs in Django storage, each with a sha256 checksum.

Writing: the file goes to storage first, then the row, so a row never
points at a file that was not written. A crash between the two leaves an orphan file,
never a dangling row. Reading verifies size and checksum: a missing or changed file
raises ``ArtifactInvalid``, which the executor turns into a takeover instead of letting
the step act on garbage.

Storage paths are ``runs/<run id>/<step id>-a<attempt>/<name>``: unique per attempt, so
a retried step never overwrites what an earlier attempt (maybe referenced by a
checkpoint) wrote.
"""

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction

from runs.engine import hooks
from runs.engine.control.takeovers import open_takeover
from runs.engine.data import artifact_files
from runs.engine.effects.calls import CallTimedOut, call_with_timeout
from runs.engine.errors import LeaseLost, StepError
from runs.engine.state import values
from runs.engine.state.gateway import attempt_holds, run_transaction
from runs.models import Artifact, Checkpoint, Run, Step
from runs.states import StepStatus

T = TypeVar("T")


class ArtifactInvalid(StepError):
    """An artifact's file is missing or does not match its recorded checksum/size.

    ``artifact`` is the row; ``problem`` is ``"missing"`` or ``"checksum_mismatch"``;
    ``actual`` the sha256 found (``None`` when missing).
    """

    def __init__(self, artifact: Artifact, problem: str, actual: str | None = None):
        super().__init__(
            "ARTIFACT_INVALID",
            f"artifact {artifact.name} (id {artifact.pk}) is {problem.replace('_', ' ')}",
        )
        self.artifact = artifact
        self.problem = problem
        self.actual = actual


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def write_artifact(
    *,
    run: Run,
    step: Step,
    attempt: int,
    name: str,
    data: bytes | str,
    kind: str = "file",
    metadata: dict[str, Any] | None = None,
    timeout: float | None = None,
) -> Artifact:
    """Store ``data`` (str is UTF-8 encoded) as artifact ``name`` of ``step``: file first,
    then the row, which is only inserted while ``attempt`` still holds the step.

    Returns the row. Raises ``LeaseLost`` when the attempt lost the step (the file then
    stays as an unreferenced orphan), ``values.InvalidValue`` (before writing anything)
    for a ``name`` holding NUL or ``metadata`` that cannot be stored faithfully, and
    ``StepError("TIMEOUT")`` when writing the file takes longer than ``timeout`` seconds
    (``None``: no limit; a write that lands later is an orphan ``artifacts check``
    finds).
    """
    # Checked before the file is written: a refused value leaves no orphan file.
    if "\x00" in name:
        raise values.InvalidValue("artifact name", "$", "str", "a file name cannot hold NUL")
    metadata = values.storable(
        {"attempt": attempt, "generation": step.generation, **(metadata or {})},
        "artifact metadata",
    )
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    path = f"runs/{run.pk}/{step.pk}-a{attempt}/{name}"

    def store() -> str:
        stored = default_storage.save(path, ContentFile(raw))
        # Durable before any row may refer to it (docs/data-safety.md).
        artifact_files.fsync_file(default_storage, stored)
        return stored

    stored = _storage_call(store, timeout, f"writing artifact {name}")
    hooks.reached(hooks.ARTIFACT_WRITTEN, run, step)
    with transaction.atomic():
        if not attempt_holds(step.pk, attempt):
            raise LeaseLost(f"step {step.pk} attempt {attempt} no longer holds the lease")
        return Artifact.objects.create(
            run_id=run.pk,
            step_id=step.pk,
            kind=kind,
            name=name,
            uri=stored,
            checksum=sha256_hex(raw),
            size=len(raw),
            metadata=metadata,
        )


def _storage_call(fn: Callable[[], T], timeout: float | None, what: str) -> T:
    """``fn()`` (storage I/O, outside any transaction) within ``timeout`` seconds; raises
    ``StepError("TIMEOUT")`` past it (retryable: the storage may answer next time)."""
    try:
        return call_with_timeout(fn, timeout)
    except CallTimedOut as exc:
        raise StepError("TIMEOUT", f"{what}: storage {exc}") from exc


def read_artifact(artifact: Artifact, *, timeout: float | None = None) -> bytes:
    """The artifact's bytes after checking size and sha256 against the row.

    Raises ``ArtifactInvalid`` (``missing`` or ``checksum_mismatch``), or
    ``StepError("TIMEOUT")`` when reading takes longer than ``timeout`` seconds
    (``None``: no limit).
    """

    def read() -> bytes:
        with default_storage.open(artifact.uri, "rb") as fh:
            return fh.read()

    try:
        raw = _storage_call(read, timeout, f"reading artifact {artifact.name}")
    except (FileNotFoundError, OSError):
        raise ArtifactInvalid(artifact, "missing") from None
    actual = sha256_hex(raw)
    if actual != artifact.checksum or len(raw) != artifact.size:
        raise ArtifactInvalid(artifact, "checksum_mismatch", actual)
    return raw


def verify_artifact(artifact: Artifact) -> str | None:
    """``None`` when the file is intact, else ``"missing"`` or ``"checksum_mismatch"``."""
    try:
        read_artifact(artifact)
    except ArtifactInvalid as exc:
        return exc.problem
    return None


def pause_for_invalid_artifact(
    run: Run, step: Step, attempt: int, worker_id: str, error: ArtifactInvalid
) -> None:
    """The step found a missing or corrupt artifact: fail this attempt (fenced) and pause
    the run with an ``artifact_invalid`` takeover whose evidence names the file, the
    expected and the actual checksum. Never retried automatically: the bytes will not
    heal by themselves."""
    artifact = error.artifact
    with run_transaction(run.pk) as tx:
        moved = tx.finish_attempt(
            step,
            attempt,
            StepStatus.FAILED,
            actor=worker_id,
            rejected={"error_code": error.code},
            payload={"attempt": attempt, "error_code": error.code, "error_detail": error.detail},
            owner="",
            lease_until=None,
            error_code=error.code,
            error_detail=error.detail,
        )
        if not moved:
            return
        before = _checkpoint_before(run, artifact.step.name) if artifact.step else None
        open_takeover(
            tx,
            cause="artifact_invalid",
            reason=error.detail,
            actor=worker_id,
            step=step,
            suggested_action=(
                f"Resume from checkpoint {before} to write {artifact.name} "
                "again (or restore the file, then retry the step)."
                if before
                else f"Restore {artifact.name}, then retry the step."
            ),
            evidence={
                "artifact_id": artifact.pk,
                "name": artifact.name,
                "uri": artifact.uri,
                "problem": error.problem,
                "expected_sha256": artifact.checksum,
                "actual_sha256": error.actual,
                "expected_size": artifact.size,
            },
        )


def _checkpoint_before(run: Run, step_name: str) -> str | None:
    """The name of the newest checkpoint whose next step is ``step_name``."""
    for checkpoint in Checkpoint.objects.filter(run_id=run.pk).order_by("-pk"):
        if checkpoint.state.get("phase") == step_name:
            return checkpoint.name
    return None
