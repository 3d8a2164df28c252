"""``python manage.py drill NAME|--all [--json]``."""

import json

from django.core.management.base import CommandError

import lab.drills.catalog  # noqa: F401 - registers the drills
import lab.drills.partition  # noqa: F401 - registers the partition drill
from lab.drills.base import DRILLS, format_table, run_drill
from lab.drills.interrupt import Interrupted, stop_on_signals
from lab.drills.sandbox import SandboxError, server_from_settings
from runs.cli.common import one_line
from runs.cli.terminal import TerminalSafeCommand


class Command(TerminalSafeCommand):
    help = (
        "Run fault drills against real worker processes (scratch database and Redis db on "
        "the configured servers); exits 1 if any drill fails."
    )

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(DRILLS))
        parser.add_argument("--all", dest="run_all", action="store_true", help="run every drill")
        parser.add_argument("--json", action="store_true", help="print results as JSON")

    def handle(self, *args, names, run_all, **options):
        as_json = options["json"]
        if run_all:
            names = list(DRILLS)
        if not names:
            raise CommandError("name a drill or use --all; drills: " + ", ".join(DRILLS))
        unknown = [n for n in names if n not in DRILLS]
        if unknown:
            raise CommandError(
                f"unknown drill(s) {', '.join(unknown)}; drills: {', '.join(DRILLS)}"
            )
        try:
            server_from_settings()
        except SandboxError as exc:
            raise CommandError(one_line(str(exc))) from exc
        results = []
        try:
            with stop_on_signals():
                for name in names:
                    if not as_json:
                        self.stderr.write(f"drill {name}: {DRILLS[name].title}")
                    results.append(run_drill(name))
        except Interrupted as exc:
            self.stderr.write(f"drill: interrupted by {exc}; every process it started is stopped")
            raise SystemExit(exc.exit_code) from None
        if as_json:
            self.stdout.write(json.dumps([r.as_dict() for r in results], indent=2))
        else:
            self.stdout.write(format_table(results))
            for r in results:
                if r.error:
                    self.stderr.write(f"--- {r.name} error:\n{r.error}")
        if any(not r.passed for r in results):
            raise SystemExit(1)
