"""``python manage.py backup DEST``: database + artifact files in one verified archive."""

import json

from django.core.management.base import CommandError

from runs.cli import arguments
from runs.cli.common import one_line
from runs.cli.terminal import TerminalSafeCommand
from runs.engine.service import BackupError, create_backup


class Command(TerminalSafeCommand):
    help = (
        "Write the database (pg_dump snapshot on PostgreSQL, online backup API on "
        "SQLite) and every artifact file its rows refer to into the tar archive DEST, "
        "with a manifest of sha256 checksums. Safe while workers run."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "dest", type=arguments.output_file, help="archive path to write (replaced atomically)"
        )
        parser.add_argument(
            "--json", action="store_true", help="print the manifest summary as JSON"
        )

    def handle(self, *args, dest: str, **options):
        try:
            manifest = create_backup(dest)
        except BackupError as exc:
            raise CommandError(one_line(str(exc))) from exc
        summary = {
            "dest": dest,
            "vendor": manifest["vendor"],
            "counts": manifest["counts"],
            "artifacts": len(manifest["artifacts"]),
            "created_at": manifest["created_at"],
        }
        if options["json"]:
            self.stdout.write(json.dumps(summary))
            return
        counts = ", ".join(f"{v} {k}" for k, v in manifest["counts"].items())
        self.stdout.write(
            f"backup written to {dest} ({manifest['vendor']}): {counts}; "
            f"{len(manifest['artifacts'])} artifact file(s) verified"
        )
