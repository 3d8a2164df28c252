"""Backup and restore of the database and the artifact files together, in one archive.

Archive (an uncompressed tar):

    manifest.json          format, vendor, created_at, counts, database entry,
                           artifacts [{artifact_id, uri, sha256, size}], migrations
    database/db.sqlite3    SQLite: a copy made with the online backup API
    database/db.dump       PostgreSQL: ``pg_dump -Fc`` of an exported snapshot
    artifacts/<uri>        every file an artifact row of that snapshot refers to

Consistency: the database copy is one snapshot, and the artifact list is read from that
same snapshot. Files are written before their rows commit and are never rewritten, so
every row in the snapshot has its file in storage already; it is copied (and its
sha256 checked against the row) after the snapshot. A row whose file is missing or
corrupt in live storage fails the backup instead of producing an archive that refers to
nothing. Rows committed after the snapshot are simply not in this backup.

Restore goes into an empty database (no runs, threads or artifacts; a freshly migrated
one is fine) and empty storage, verifies every member against the manifest first, and
checks every restored row's file afterwards. Non-terminal runs then continue through the
normal startup recovery of the next worker (their leases are in the past).
"""

import contextlib
import glob
import hashlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import connection, transaction
from django.utils import timezone

from runs.engine.data import artifact_files
from runs.models import Artifact, Event, Message, Run, Step, Thread

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
COUNTED = {
    "threads": Thread,
    "runs": Run,
    "steps": Step,
    "messages": Message,
    "events": Event,
    "artifacts": Artifact,
}


class BackupError(Exception):
    """Backup or restore refused or failed; the message says why (nothing partial is
    left at the destination)."""


def _sha256_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(artifact_files.CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def pg_tool(name: str) -> str:
    """Path of ``pg_dump``/``pg_restore``: ``AGENTOPS_PG_BIN``, else PATH, else the
    newest ``/usr/lib/postgresql/*/bin``. Raises ``BackupError`` if none is found."""
    candidates = []
    if settings.AGENTOPS_PG_BIN:
        candidates.append(os.path.join(settings.AGENTOPS_PG_BIN, name))
    found = shutil.which(name)
    if found:
        candidates.append(found)
    candidates += [
        os.path.join(d, name)
        for d in sorted(
            glob.glob("/usr/lib/postgresql/*/bin"),
            key=lambda d: int(d.split("/")[-2]),
            reverse=True,
        )
    ]
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    raise BackupError(f"{name} not found (set AGENTOPS_PG_BIN to its directory)")


def _pg_env() -> dict[str, str]:
    db = connection.settings_dict
    env = dict(os.environ)
    for key, var in (
        ("HOST", "PGHOST"),
        ("PORT", "PGPORT"),
        ("USER", "PGUSER"),
        ("PASSWORD", "PGPASSWORD"),
        ("NAME", "PGDATABASE"),
    ):
        if db.get(key):
            env[var] = str(db[key])
    return env


def _snapshot_rows(cursor) -> tuple[list[tuple], dict[str, int], list[str]]:
    """(artifact rows, counts, applied migrations) as seen by ``cursor``'s snapshot."""
    cursor.execute(f"SELECT id, uri, checksum, size FROM {Artifact._meta.db_table} ORDER BY id")
    rows = cursor.fetchall()
    counts = {}
    for key, model in COUNTED.items():
        cursor.execute(f"SELECT COUNT(*) FROM {model._meta.db_table}")
        counts[key] = cursor.fetchone()[0]
    cursor.execute("SELECT app, name FROM django_migrations ORDER BY app, name")
    migrations = [f"{app}.{name}" for app, name in cursor.fetchall()]
    return rows, counts, migrations


def _dump_sqlite(target: Path) -> tuple[list[tuple], dict[str, int], list[str]]:
    source = sqlite3.connect(settings.DATABASES["default"]["NAME"], timeout=30)
    try:
        dest = sqlite3.connect(target)
        try:
            source.backup(dest)  # one consistent copy, even while workers write (WAL)
            dest.execute("PRAGMA journal_mode=DELETE")
            with contextlib.closing(dest.cursor()) as cursor:
                return _snapshot_rows(cursor)
        finally:
            dest.close()
    finally:
        source.close()


def _dump_postgres(target: Path) -> tuple[list[tuple], dict[str, int], list[str]]:
    pg_dump = pg_tool("pg_dump")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cursor.execute("SELECT pg_export_snapshot()")
        snapshot = cursor.fetchone()[0]
        rows, counts, migrations = _snapshot_rows(cursor)
        # pg_dump reads the very snapshot this transaction exported, so the dump and the
        # artifact list above are the same state; the transaction stays open meanwhile.
        proc = subprocess.run(
            [
                pg_dump,
                "-Fc",
                "--no-owner",
                "--no-privileges",
                f"--snapshot={snapshot}",
                "-f",
                str(target),
            ],
            env=_pg_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise BackupError(f"pg_dump failed: {proc.stderr.strip()[-2000:]}")
    return rows, counts, migrations


def create_backup(dest: Path | str, storage=None) -> dict[str, Any]:
    """Write the archive ``dest`` (replaced atomically); returns the manifest.

    Raises ``BackupError`` when ``dest`` is empty or a directory or cannot be written
    (no ``.partial`` file is left), the database vendor is unsupported, pg_dump fails,
    or a row's file is missing or corrupt in storage.
    """
    storage = storage or default_storage
    if not str(dest).strip():
        raise BackupError("the archive path must not be empty")
    dest = Path(dest).resolve()
    if dest.is_dir():
        raise BackupError(f"{dest} is a directory; name an archive file in it")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackupError(f"cannot create the directory of {dest}: {exc.strerror or exc}") from exc
    with tempfile.TemporaryDirectory(prefix=".backup-", dir=dest.parent) as tmp_name:
        tmp = Path(tmp_name)
        if connection.vendor == "sqlite":
            db_member = "database/db.sqlite3"
            (tmp / "database").mkdir()
            rows, counts, migrations = _dump_sqlite(tmp / db_member)
        elif connection.vendor == "postgresql":
            db_member = "database/db.dump"
            (tmp / "database").mkdir()
            rows, counts, migrations = _dump_postgres(tmp / db_member)
        else:
            raise BackupError(f"backup of a {connection.vendor} database is not supported")
        db_sha, db_size = _sha256_file(tmp / db_member)
        artifacts, problems = [], []
        for artifact_id, uri, checksum, _size in rows:
            copy = tmp / "artifacts" / uri
            copy.parent.mkdir(parents=True, exist_ok=True)
            try:
                with storage.open(uri, "rb") as src, open(copy, "wb") as out:
                    shutil.copyfileobj(src, out, artifact_files.CHUNK)
            except FileNotFoundError:
                problems.append(f"artifact {artifact_id} {uri}: missing")
                continue
            sha, real_size = _sha256_file(copy)
            if sha != checksum:
                problems.append(f"artifact {artifact_id} {uri}: checksum differs")
                continue
            artifacts.append(
                {"artifact_id": artifact_id, "uri": uri, "sha256": sha, "size": real_size}
            )
        if problems:
            raise BackupError(
                "artifact files do not match their rows (run `artifacts check`): "
                + "; ".join(problems[:20])
            )
        manifest = {
            "format": FORMAT_VERSION,
            "vendor": connection.vendor,
            "created_at": timezone.now().isoformat(),
            "counts": counts,
            "migrations": migrations,
            "database": {"path": db_member, "sha256": db_sha, "size": db_size},
            "artifacts": artifacts,
        }
        partial = dest.with_name(dest.name + ".partial")
        try:
            with tarfile.open(partial, "w") as tar:
                data = json.dumps(manifest, indent=1).encode()
                info = tarfile.TarInfo(MANIFEST)
                info.size = len(data)
                info.mtime = int(timezone.now().timestamp())
                tar.addfile(info, io.BytesIO(data))
                tar.add(tmp / db_member, arcname=db_member)
                for entry in artifacts:
                    tar.add(tmp / "artifacts" / entry["uri"], arcname=f"artifacts/{entry['uri']}")
            with open(partial, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(partial, dest)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise BackupError(f"cannot write {dest}: {exc.strerror or exc}") from exc
    return manifest


def read_manifest(src: Path | str) -> dict[str, Any]:
    """The manifest of archive ``src``; raises ``BackupError`` (one line ending
    ``[invalid_archive]``) if unreadable."""
    try:
        # Asked first because tarfile.open's own refusal lists each compression it tried,
        # one a line.
        if not tarfile.is_tarfile(src):
            raise BackupError(
                f"{src}: not a readable backup archive (not a tar archive) [invalid_archive]"
            )
        with tarfile.open(src, "r") as tar:
            member = tar.extractfile(MANIFEST)
            if member is None:
                raise BackupError(f"{src}: {MANIFEST} is not a file [invalid_archive]")
            return json.load(member)
    except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
        raise BackupError(
            f"{src}: not a readable backup archive ({exc}) [invalid_archive]"
        ) from exc


def verify_archive(src: Path | str, into: Path) -> dict[str, Any]:
    """Extract ``src`` into ``into`` and check every member against the manifest (and
    that nothing else is in it); returns the manifest. Raises ``BackupError``."""
    manifest = read_manifest(src)
    if manifest.get("format") != FORMAT_VERSION:
        raise BackupError(f"unsupported backup format {manifest.get('format')!r}")
    expected = {
        manifest["database"]["path"]: (manifest["database"]["sha256"], manifest["database"]["size"])
    }
    for entry in manifest["artifacts"]:
        expected[f"artifacts/{entry['uri']}"] = (entry["sha256"], entry["size"])
    seen = set()
    with tarfile.open(src, "r") as tar:
        for member in tar:
            if member.name == MANIFEST:
                continue
            if member.name not in expected or not member.isfile():
                raise BackupError(f"archive member {member.name!r} is not in the manifest")
            tar.extract(member, into, filter="data")
            sha, size = _sha256_file(into / member.name)
            if (sha, size) != expected[member.name]:
                raise BackupError(f"archive member {member.name} does not match the manifest")
            seen.add(member.name)
    missing = sorted(set(expected) - seen)
    if missing:
        raise BackupError(
            f"archive lacks {len(missing)} member(s) of the manifest, e.g. {missing[0]}"
        )
    return manifest


def _table_exists(cursor, table: str) -> bool:
    return table in connection.introspection.table_names(cursor)


def target_problems(storage=None) -> list[str]:
    """Why the current database and storage are not empty enough to restore into."""
    storage = storage or default_storage
    problems = []
    with connection.cursor() as cursor:
        for key, model in COUNTED.items():
            table = model._meta.db_table
            if _table_exists(cursor, table):
                cursor.execute(f"SELECT COUNT(*) FROM {table}")
                if cursor.fetchone()[0]:
                    problems.append(f"the database already has {key}")
    files = artifact_files.walk(storage)
    if files:
        problems.append(f"the artifact storage already has {len(files)} file(s), e.g. {files[0]}")
    return problems


def restore_backup(src: Path | str, storage=None) -> dict[str, Any]:
    """Restore archive ``src`` into the (empty) current database and storage; returns
    ``{"manifest", "counts", "artifacts_checked"}``. Raises ``BackupError`` when the
    archive does not verify, the vendor differs, or the target is not empty."""
    storage = storage or default_storage
    manifest = read_manifest(src)
    if manifest.get("vendor") != connection.vendor:
        raise BackupError(
            f"the backup is of a {manifest.get('vendor')} database; this "
            f"deployment uses {connection.vendor}"
        )
    problems = target_problems(storage)
    if problems:
        raise BackupError("restore needs an empty database and storage: " + "; ".join(problems))
    with tempfile.TemporaryDirectory(prefix="agentops-restore-") as tmp_name:
        tmp = Path(tmp_name)
        manifest = verify_archive(src, tmp)
        db_file = tmp / manifest["database"]["path"]
        connection.close()
        if connection.vendor == "sqlite":
            _restore_sqlite(db_file)
        else:
            _restore_postgres(db_file)
        for entry in manifest["artifacts"]:
            with open(tmp / "artifacts" / entry["uri"], "rb") as fh:
                name = storage.save(entry["uri"], File(fh))
            if name != entry["uri"]:
                raise BackupError(f"storage saved {entry['uri']} as {name}")
            artifact_files.fsync_file(storage, name)
    counts = {key: model._default_manager.count() for key, model in COUNTED.items()}
    if counts != manifest["counts"]:
        raise BackupError(f"restored counts {counts} differ from the manifest {manifest['counts']}")
    bad = []
    for artifact in Artifact.objects.order_by("pk"):
        found = artifact_files.file_digest(artifact.uri, storage)
        if found is None or found[0] != artifact.checksum:
            bad.append(artifact.uri)
    if bad:
        raise BackupError(
            f"{len(bad)} restored artifact row(s) lack a matching file, e.g. {bad[0]}"
        )
    return {"manifest": manifest, "counts": counts, "artifacts_checked": len(manifest["artifacts"])}


def _restore_sqlite(db_file: Path) -> None:
    source = sqlite3.connect(db_file)
    try:
        dest = sqlite3.connect(settings.DATABASES["default"]["NAME"], timeout=30)
        try:
            source.backup(dest)  # page copy through SQLite itself: WAL and locks respected
        finally:
            dest.close()
    finally:
        source.close()


def _restore_postgres(db_file: Path) -> None:
    proc = subprocess.run(
        [
            pg_tool("pg_restore"),
            "--clean",
            "--if-exists",
            "--no-owner",
            "--no-privileges",
            "--single-transaction",
            "--exit-on-error",
            "-d",
            connection.settings_dict["NAME"],
            str(db_file),
        ],
        env=_pg_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BackupError(f"pg_restore failed: {proc.stderr.strip()[-2000:]}")
