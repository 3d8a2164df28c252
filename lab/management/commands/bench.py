"""``python manage.py bench [--steps N] [--workers W] [--json PATH]``."""

import json

from django.core.management.base import CommandError

from lab.drills.bench import DEFAULT_AGENTS, PARTS, AgentsShape, format_table, run_bench
from lab.drills.bench_branches import DEFAULT_BRANCHES, BranchesShape
from lab.drills.interrupt import Interrupted, stop_on_signals
from lab.drills.sandbox import SandboxError
from runs.cli import arguments
from runs.cli.common import one_line
from runs.cli.terminal import TerminalSafeCommand
from runs.engine.execution.slots import MAX_SLOTS
from runs.workflows.definition import MAX_BRANCHES


class Command(TerminalSafeCommand):
    help = (
        "Benchmark the engine against raw RQ and raw PostgreSQL, recovery after SIGKILL, "
        "console page times and steps that wait on a model (scratch database; asserts "
        "nothing about time)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--steps", type=arguments.integer(1), default=2000, help="no-op steps in all"
        )
        parser.add_argument(
            "--workers", type=arguments.integer(1, 64), default=2, help="worker processes"
        )
        parser.add_argument(
            "--json",
            metavar="PATH",
            type=arguments.output_file,
            help="also write the figures as JSON",
        )
        parser.add_argument(
            "--kills",
            type=arguments.integer(),
            default=5,
            help="SIGKILLs for recovery (0: skip that part)",
        )
        parser.add_argument(
            "--stops",
            type=arguments.integer(),
            default=2,
            help="SIGSTOPs for the lease fallback, about a lease long (0: skip that part)",
        )
        parser.add_argument(
            "--only",
            default=",".join(PARTS),
            help=f"comma-separated parts to run (default all: {','.join(PARTS)})",
        )
        parser.add_argument(
            "--console-runs",
            type=arguments.integer(),
            default=100_000,
            help="runs seeded for the console pages (0: skip that part)",
        )
        parser.add_argument(
            "--events-per-run",
            type=arguments.integer(),
            default=10,
            help="console part: events seeded for each of the --console-runs runs, so the "
            "pages read a realistic history (default 10; 0: runs without events)",
        )
        parser.add_argument(
            "--agent-runs",
            type=arguments.integer(),
            default=DEFAULT_AGENTS.runs,
            help="agents part: runs of 3 steps that each wait on the model (0: skip that part)",
        )
        parser.add_argument(
            "--agent-wait",
            type=arguments.number(0.001, 600),
            default=DEFAULT_AGENTS.wait_s,
            help="agents part: seconds the loopback model takes to answer (default 1)",
        )
        parser.add_argument(
            "--agent-workers",
            type=arguments.integer(1, 64),
            default=DEFAULT_AGENTS.workers,
            help="agents part: worker processes (default 2)",
        )
        parser.add_argument(
            "--agent-slots",
            type=arguments.integer(1, MAX_SLOTS),
            default=DEFAULT_AGENTS.slots,
            help="agents part: execution slots per worker (default 200)",
        )
        parser.add_argument(
            "--branch-items",
            type=arguments.integer(0, MAX_BRANCHES),
            default=DEFAULT_BRANCHES.items,
            help="branches part: items the fanout_demo run fans out over (0: skip that part)",
        )
        parser.add_argument(
            "--branch-delay",
            type=arguments.number(0, 60),
            default=DEFAULT_BRANCHES.delay_s,
            help="branches part: seconds each branch's outside call takes (default 1)",
        )
        parser.add_argument(
            "--branch-slots",
            type=arguments.integer(1, MAX_SLOTS),
            default=DEFAULT_BRANCHES.slots,
            help="branches part: execution slots of each of its 2 workers (default 64)",
        )
        parser.add_argument(
            "--pg-seconds",
            type=arguments.number(),
            default=5.0,
            help="seconds of raw PostgreSQL writes (0: skip that part)",
        )

    def handle(self, *args, **opts):
        only = tuple(p.strip() for p in opts["only"].split(",") if p.strip())
        unknown = sorted(set(only) - set(PARTS))
        if unknown or not only:
            raise CommandError(f"--only: unknown part(s) {unknown}; choose from {','.join(PARTS)}")

        def say(line: str) -> None:
            self.stderr.write(f"bench: {line}")

        try:
            with stop_on_signals():
                result = run_bench(
                    steps=opts["steps"],
                    workers=opts["workers"],
                    kills=opts["kills"],
                    stops=opts["stops"],
                    only=only,
                    pg_seconds=opts["pg_seconds"],
                    console_runs=opts["console_runs"],
                    events_per_run=opts["events_per_run"],
                    agents=AgentsShape(
                        opts["agent_runs"],
                        opts["agent_wait"],
                        opts["agent_workers"],
                        opts["agent_slots"],
                    ),
                    branches=BranchesShape(
                        opts["branch_items"], opts["branch_delay"], 2, opts["branch_slots"]
                    ),
                    say=say,
                )
        except SandboxError as exc:
            raise CommandError(one_line(str(exc))) from exc
        except Interrupted as exc:
            say(f"interrupted by {exc}; every process it started is stopped")
            raise SystemExit(exc.exit_code) from None
        self.stdout.write(format_table(result))
        if opts["json"]:
            with open(opts["json"], "w", encoding="utf-8") as fh:
                json.dump(result, fh, indent=2, default=str)
            self.stdout.write(f"wrote {opts['json']}")
