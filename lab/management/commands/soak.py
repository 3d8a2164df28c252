"""``python manage.py soak --runs N --workers W --duration S [--kill-every S] [--seed N]``."""

import json
import random

from django.conf import settings
from django.core.management.base import CommandError

from lab.drills.interrupt import Interrupted, stop_on_signals
from lab.drills.sandbox import SandboxError
from lab.drills.soak import Soak, format_report
from runs.cli import arguments
from runs.cli.common import one_line
from runs.cli.terminal import TerminalSafeCommand
from runs.engine.execution.slots import MAX_SLOTS


class Command(TerminalSafeCommand):
    help = (
        "Chaos soak: mixed workflows under random SIGKILL/SIGSTOP/Redis restarts/duplicate "
        "notifications, then invariants; exits 1 on any violation (prints the seed)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--runs", type=arguments.integer(1), required=True, help="how many runs to start"
        )
        parser.add_argument(
            "--workers",
            type=arguments.integer(1, 64),
            required=True,
            help="worker processes to keep running",
        )
        parser.add_argument(
            "--duration", type=arguments.number(), required=True, help="seconds of faults (0: none)"
        )
        parser.add_argument(
            "--kill-every",
            type=arguments.number(),
            default=3.0,
            help="seconds between faults (default 3; 0: no faults)",
        )
        parser.add_argument(
            "--seed", type=arguments.integer(), default=None, help="default: random"
        )
        parser.add_argument(
            "--slots",
            type=arguments.integer(1, MAX_SLOTS),
            default=None,
            help="execution slots of each worker process (default: AGENTOPS_WORKER_CONCURRENCY)",
        )
        parser.add_argument(
            "--json",
            metavar="PATH",
            type=arguments.output_file,
            help="also write the report as JSON",
        )

    def handle(self, *args, runs, workers, duration, kill_every, seed, slots, **opts):
        seed = seed if seed is not None else random.SystemRandom().randrange(1, 10**6)
        self.stdout.write(f"soak seed {seed}")
        self.stdout.flush()
        try:
            with stop_on_signals():
                report = Soak(
                    runs=runs,
                    workers=workers,
                    duration=duration,
                    kill_every=kill_every,
                    seed=seed,
                    slots=slots or settings.AGENTOPS_WORKER_CONCURRENCY,
                    say=lambda line: self.stderr.write(f"soak: {line}"),
                ).run()
        except SandboxError as exc:
            raise CommandError(one_line(str(exc))) from exc
        except Interrupted as exc:
            self.stderr.write(f"soak: interrupted by {exc}; every process it started is stopped")
            raise SystemExit(exc.exit_code) from None
        self.stdout.write(format_report(report))
        if opts["json"]:
            with open(opts["json"], "w", encoding="utf-8") as fh:
                json.dump(report.as_dict(), fh, indent=2, default=str)
        if not report.ok:
            raise SystemExit(1)
