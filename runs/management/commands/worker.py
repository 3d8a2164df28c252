"""``python manage.py worker [--burst] [--queue NAME] [--mode rq|db] [--concurrency N]``."""

import logging

from django.core.management.base import CommandError

from agentops.db_session import use_process_kind
from runs.checks import redis_eviction_problem
from runs.cli import arguments
from runs.cli.terminal import TerminalSafeCommand
from runs.engine.service import MAX_SLOTS, Worker, dispatch_mode


class Command(TerminalSafeCommand):
    help = "Run a worker: RQ when REDIS_URL is set, database polling otherwise."

    def add_arguments(self, parser):
        parser.add_argument(
            "--burst",
            action="store_true",
            help="exit when nothing is due instead of waiting for work",
        )
        parser.add_argument(
            "--queue",
            default="default",
            type=arguments.required_text,
            help="RQ queue name (default: default)",
        )
        parser.add_argument(
            "--mode",
            choices=["rq", "db"],
            default=None,
            help="dispatch mode (default: rq if REDIS_URL is set, else db)",
        )
        parser.add_argument(
            "--concurrency",
            type=arguments.integer(1, MAX_SLOTS),
            default=None,
            help="execution slots: steps run at once in this process "
            "(default: AGENTOPS_WORKER_CONCURRENCY)",
        )
        parser.add_argument(
            "--fork",
            action="store_true",
            help="RQ only: fork a work horse per job, one step at a time whatever "
            "AGENTOPS_WORKER_CONCURRENCY says (slower; for comparison)",
        )

    def handle(
        self,
        *args,
        burst: bool,
        queue: str,
        mode: str | None,
        fork: bool,
        concurrency: int | None,
        **options,
    ):
        use_process_kind("worker")
        if mode == "rq" and dispatch_mode() != "rq":
            raise CommandError("--mode rq needs REDIS_URL to be set")
        if fork and concurrency is None:
            concurrency = 1  # a forked work horse runs one job: no slots to size
        try:
            worker = Worker(mode=mode, queue=queue, burst=burst, fork=fork, concurrency=concurrency)
        except ValueError as exc:  # AGENTOPS_WORKER_CONCURRENCY past MAX_SLOTS
            raise CommandError(f"AGENTOPS_WORKER_CONCURRENCY: {exc}") from None
        if fork and worker.mode != "rq":
            raise CommandError("--fork needs RQ dispatch (REDIS_URL)")
        if fork and worker.slots.threaded:
            raise CommandError("--fork runs one step at a time: it takes no --concurrency above 1")
        self.stdout.write(
            f"worker {worker.worker_id} mode={worker.mode} queue={queue} "
            f"slots={worker.slots.size}{' burst' if burst else ''}"
        )
        self.stdout.flush()
        problem = redis_eviction_problem()
        if problem is not None:
            logging.getLogger("agentops.worker").warning("%s; %s", *problem)
        executed = worker.run()
        self.stdout.write(f"worker {worker.worker_id} stopped after {executed} step(s)")
