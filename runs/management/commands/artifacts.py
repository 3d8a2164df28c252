"""``python manage.py artifacts check [--repair] [--grace SECONDS] [--json]``."""

import json

from runs.cli import arguments
from runs.cli.command import OperatorCommand
from runs.cli.common import add_actor_argument, cli_actor
from runs.engine.service import check_artifacts


class Command(OperatorCommand):
    help = (
        "Check artifact rows against their files (missing or corrupt files pause their "
        "runs) and find orphan files (deleted with --repair after the grace period). "
        "Exits 1 when a row points at a missing or corrupt file."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        check = sub.add_parser("check", help="check rows and files")
        check.add_argument(
            "--repair", action="store_true", help="delete orphan files older than the grace period"
        )
        check.add_argument(
            "--grace",
            type=arguments.number(),
            default=None,
            metavar="SECONDS",
            help="orphan grace period (default AGENTOPS_ORPHAN_GRACE_SECONDS)",
        )
        check.add_argument("--json", action="store_true", help="print one JSON object")
        add_actor_argument(check, dest="actor")

    def handle(self, *args, action: str, **options):
        actor = cli_actor(options["actor"])
        report = check_artifacts(
            repair=options["repair"], grace_seconds=options["grace"], actor=actor
        )
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict()))
        else:
            self._print(report)
        if not report.ok:
            raise SystemExit(1)

    def _print(self, report) -> None:
        out = self.stdout
        out.write(f"checked {report.checked} artifact(s)")
        for i in report.invalid:
            out.write(
                f"  {i['problem'].upper()}: {i['name']} ({i['uri']}) of run {i['run_id']} "
                f"step {i['step'] or '-'} [{i['run_status']}]"
            )
        for run_id in report.paused:
            out.write(f"  paused run {run_id} with an artifact_invalid takeover")
        for o in report.orphans:
            verb = "deleted" if o["deleted"] else "found"
            out.write(f"  orphan {verb}: {o['uri']} ({o['age_s']:.0f}s old)")
        if report.recent_orphans:
            out.write(f"  {report.recent_orphans} unreferenced file(s) within the grace period")
        out.write("OK" if report.ok else "PROBLEMS FOUND")
