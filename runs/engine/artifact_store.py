"""Artifact files in Django's default storage: durable writes with a sha256, verified
reads, and listing (DESIGN section 3, Artifact: the file first, then the row).

A file is written under a name unique to the run, step and attempt, flushed to disk
(``fsync`` of the file and its directory on a file-system storage) and only then may its
Artifact row be committed. A crash in between leaves an orphan file, which
``artifacts check --repair`` deletes after a grace period; it never leaves a row that
points at nothing.
"""

import hashlib
import os
import re
from dataclasses import dataclass
from datetime import datetime

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

CHUNK = 1024 * 1024


@dataclass(frozen=True)
class StoredFile:
    """A file written to storage: its storage name (``uri``), sha256 hex and size in bytes."""

    uri: str
    checksum: str
    size: int


def artifact_name(run_id, step_id, attempt: int, name: str) -> str:
    """``runs/<run uuid>/<step id>-a<attempt>/<safe name>``: unique per attempt, so a
    re-run never overwrites a file an earlier attempt (or a committed row) refers to."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "artifact"
    return f"runs/{run_id}/{step_id}-a{attempt}/{safe}"


def save_bytes(name: str, data: bytes, storage=None) -> StoredFile:
    """Write ``data`` as ``name`` and make it durable; returns the stored name (the
    storage may alter it if taken), checksum and size. Raises storage/OS errors."""
    storage = storage or default_storage
    uri = storage.save(name, ContentFile(data))
    _fsync(storage, uri)
    return StoredFile(uri, hashlib.sha256(data).hexdigest(), len(data))


def _fsync(storage, uri: str) -> None:
    """Flush a file-system storage's file and directory entry to disk; other storages
    (object stores) are durable when ``save`` returns."""
    try:
        path = storage.path(uri)
    except NotImplementedError:
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    dir_fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def file_digest(uri: str, storage=None) -> tuple[str, int] | None:
    """``(sha256 hex, size)`` of the stored file, or ``None`` if it does not exist."""
    storage = storage or default_storage
    if not storage.exists(uri):
        return None
    digest = hashlib.sha256()
    size = 0
    with storage.open(uri, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


class ArtifactInvalid(Exception):
    """A stored file is missing or differs from its row's checksum; ``problem`` is
    ``"missing"`` or ``"corrupt"``."""

    def __init__(self, uri: str, problem: str):
        super().__init__(f"artifact {uri} is {problem}")
        self.uri = uri
        self.problem = problem


def read_verified(artifact, storage=None) -> bytes:
    """The bytes of an Artifact row's file after checking its sha256; raises
    ``ArtifactInvalid``."""
    storage = storage or default_storage
    if not storage.exists(artifact.uri):
        raise ArtifactInvalid(artifact.uri, "missing")
    with storage.open(artifact.uri, "rb") as fh:
        data = fh.read()
    if hashlib.sha256(data).hexdigest() != artifact.checksum:
        raise ArtifactInvalid(artifact.uri, "corrupt")
    return data


def walk(storage=None, top: str = "") -> list[str]:
    """Every file name in the storage under ``top``, recursively, sorted."""
    storage = storage or default_storage
    try:
        dirs, files = storage.listdir(top)
    except FileNotFoundError:
        return []
    names = [f"{top}/{f}" if top else f for f in files]
    for d in dirs:
        names.extend(walk(storage, f"{top}/{d}" if top else d))
    return sorted(names)


def modified_at(uri: str, storage=None) -> datetime:
    """When the file was last written (aware datetime, storage's clock)."""
    return (storage or default_storage).get_modified_time(uri)
