"""``python manage.py seed_demo --runs N``: demo users (one per role) and N demo runs."""

import time

from django.core.management.base import CommandError

from lab import demo_seed
from runs.cli import arguments
from runs.cli.command import OperatorCommand


class Command(OperatorCommand):
    help = (
        "Fill the database with a realistic mix of demo runs (every state, stuck runs, "
        "unknown outcomes, approvals, takeovers, long event histories) and one user per "
        "console role."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--runs", type=arguments.integer(), default=200, help="number of runs (default 200)"
        )
        parser.add_argument(
            "--seed", type=arguments.integer(), default=1, help="random seed (default 1)"
        )

    def handle(self, *args, runs: int, seed: int, **options):
        if runs < 0:
            raise CommandError("--runs must be >= 0")
        started = time.monotonic()
        report = demo_seed.seed(runs, seed)
        elapsed = time.monotonic() - started
        self.stdout.write(f"seeded {report.runs} runs and {report.events} events in {elapsed:.1f}s")
        for status, count in sorted(report.by_status.items()):
            self.stdout.write(f"  {status}: {count}")
        self.stdout.write("demo users (username / password / role):")
        for username, (role, password) in demo_seed.DEMO_USERS.items():
            self.stdout.write(f"  {username} / {password} / {role}")
