"""``python manage.py restore SRC``: restore a ``backup`` archive into an empty
database and artifact storage, verifying the manifest before and the files after."""

import json

from django.core.management.base import CommandError

from runs.cli import arguments
from runs.cli.common import one_line
from runs.cli.terminal import TerminalSafeCommand
from runs.engine.service import BackupError, restore_backup


class Command(TerminalSafeCommand):
    help = (
        "Restore a backup archive into an empty database (a freshly migrated one is "
        "fine) and empty artifact storage. Stop workers first; start them afterwards "
        "and non-terminal runs continue through startup recovery."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "src", type=arguments.input_file, help="archive written by `manage.py backup`"
        )
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args, src: str, **options):
        try:
            result = restore_backup(src)
        except BackupError as exc:
            raise CommandError(one_line(str(exc))) from exc
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "counts": result["counts"],
                        "artifacts_checked": result["artifacts_checked"],
                        "created_at": result["manifest"]["created_at"],
                        "migrations_pending": _migrations_pending(),
                    }
                )
            )
            return
        counts = ", ".join(f"{v} {k}" for k, v in result["counts"].items())
        if _migrations_pending():
            next_step = (
                "The backup's schema is older than this code: run `manage.py migrate`, "
                "then start workers to resume non-terminal runs."
            )
        else:
            next_step = "The schema is current: start workers to resume non-terminal runs."
        self.stdout.write(
            f"restored {src} (taken {result['manifest']['created_at']}): {counts}; "
            f"{result['artifacts_checked']} artifact file(s) verified. {next_step}"
        )


def _migrations_pending() -> bool:
    """True when the restored database lacks migrations this code has."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    return bool(executor.migration_plan(executor.loader.graph.leaf_nodes()))
