"""``python manage.py prune --older-than DAYS [--dry-run] [--json]``: the retention
policy for finished runs (``runs.engine.data.retention``)."""

import json

from runs.cli import arguments
from runs.cli.command import OperatorCommand
from runs.engine.service import prune


class Command(OperatorCommand):
    help = (
        "Remove the payloads, checkpoints and artifacts of runs that finished more than "
        "DAYS days ago and compact their events (the audit trail and status changes stay). "
        "Pruned runs can no longer be resumed or replayed."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than",
            dest="days",
            type=arguments.number(0, arguments.MAX_DAYS),
            required=True,
            metavar="DAYS",
            help="prune terminal runs finished more than DAYS days ago (>= 0, may be 0.5)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would go, change nothing"
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, days: float, dry_run: bool, **options):
        report = prune(days, dry_run=dry_run)
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict()))
            return
        verb = "would prune" if dry_run else "pruned"
        self.stdout.write(
            f"{verb} {report.runs} run(s) finished more than {days:g} day(s) ago: "
            f"{report.payloads} payload(s) ({report.payload_bytes} bytes), "
            f"{report.step_outputs} step output(s), {report.ledger_results} ledger result(s), "
            f"{report.checkpoints} checkpoint(s), {report.artifacts} artifact(s) "
            f"({report.artifact_bytes} bytes), {report.events_removed} event(s)"
        )
