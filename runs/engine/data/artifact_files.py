"""Storage-level helpers for artifact files in Django's default storage: making a
written file durable, hashing a stored file, and listing files (for ``artifacts check``
and ``backup``). Writing and reading artifacts is ``runs.engine.data.artifacts``.
"""

import hashlib
import os
from datetime import datetime

from django.core.files.storage import default_storage

CHUNK = 1024 * 1024


def fsync_file(storage, uri: str) -> None:
    """Flush a file-system storage's file and its directory entry to disk, so the file
    survives a power loss once its row is committed; other storages (object stores) are
    durable when ``save`` returns."""
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
    """``(sha256 hex, size in bytes)`` of the stored file, or ``None`` if it does not exist."""
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
    """When the file was last written (aware datetime, the storage host's clock)."""
    return (storage or default_storage).get_modified_time(uri)
