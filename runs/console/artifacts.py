"""Reading artifacts for the console: checksum verification, previews and downloads.

An artifact's ``uri`` is a name in Django's default storage (the file system under
``MEDIA_ROOT`` unless configured otherwise). The bytes are untrusted: previews are shown
as escaped text and downloads are sent as attachments, never rendered inline.
"""

import hashlib

from django.core.files.storage import default_storage

from runs.models import Artifact

#: Bytes read for an approval's preview of an artifact.
PREVIEW_BYTES = 4000
VERIFIED, MISMATCH, MISSING = "verified", "checksum mismatch", "missing"


def _name(artifact: Artifact) -> str:
    return artifact.uri.removeprefix("file://")


def open_artifact(artifact: Artifact):
    """The artifact's file opened for binary reading; raises ``OSError`` if missing."""
    try:
        return default_storage.open(_name(artifact), "rb")
    except (FileNotFoundError, ValueError) as exc:
        raise OSError(f"artifact {artifact.pk} is missing: {exc}") from exc


def verify(artifact: Artifact) -> str:
    """``"verified"`` if the stored bytes match the sha256 checksum, ``"checksum
    mismatch"`` if not, ``"missing"`` if the file cannot be read."""
    digest = hashlib.sha256()
    try:
        with open_artifact(artifact) as fh:
            for chunk in iter(lambda: fh.read(65536), b""):
                digest.update(chunk)
    except OSError:
        return MISSING
    return VERIFIED if digest.hexdigest() == artifact.checksum else MISMATCH


def preview(artifact: Artifact, limit: int = PREVIEW_BYTES) -> str:
    """The first ``limit`` bytes decoded as UTF-8 (invalid bytes replaced), or a note
    that the file is missing. The caller renders it escaped."""
    try:
        with open_artifact(artifact) as fh:
            data = fh.read(limit + 1)
    except OSError:
        return "(artifact file missing)"
    text = data[:limit].decode("utf-8", errors="replace")
    return text + ("\n… (truncated; download for the whole file)" if len(data) > limit else "")
