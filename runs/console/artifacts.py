"""Reading artifacts for the console: checksum verification, previews and downloads.

An artifact's ``uri`` is a name in Django's default storage (the file system under
``MEDIA_ROOT`` unless configured otherwise). The bytes are untrusted: previews are shown
as escaped text and downloads are sent as attachments, never rendered inline.
"""

from django.core.files.storage import default_storage

from runs.engine.service import verify_artifact
from runs.models import Artifact

#: Bytes read for an approval's preview of an artifact.
PREVIEW_BYTES = 4000
VERIFIED, MISMATCH, MISSING = "verified", "checksum mismatch", "missing"


def open_artifact(artifact: Artifact):
    """The artifact's file opened for binary reading; raises ``OSError`` if missing."""
    try:
        return default_storage.open(artifact.uri, "rb")
    except (FileNotFoundError, ValueError) as exc:
        raise OSError(f"artifact {artifact.pk} is missing: {exc}") from exc


def verify(artifact: Artifact) -> str:
    """``"verified"`` if the stored bytes match the row's size and sha256, ``"checksum
    mismatch"`` if not, ``"missing"`` if the file cannot be read (the engine's check)."""
    problem = verify_artifact(artifact)
    if problem is None:
        return VERIFIED
    return MISSING if problem == "missing" else MISMATCH


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
