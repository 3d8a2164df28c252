"""``python manage.py sweeper [--once]``: recover lost notifications and expired leases.
The loop outlives database and Redis outages: a failed round is logged and retried."""

import logging
import signal
import threading

from django.conf import settings
from django.db import close_old_connections, connection

from agentops.db_session import use_process_kind
from runs.cli.terminal import TerminalSafeCommand
from runs.engine.service import (
    RepeatedFailureLog,
    acquire_maintenance_lease,
    new_worker_id,
    seconds_until_due,
    sweep_once,
)

logger = logging.getLogger(__name__)


class Command(TerminalSafeCommand):
    help = "Run the sweeper loop (or one pass with --once)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one pass, then exit")

    def handle(self, *args, once: bool, **options):
        use_process_kind("worker")
        actor = f"sweeper:{new_worker_id()}"
        if once:
            report = sweep_once(actor)
            self.stdout.write(f"swept: {report.counts}")
            return
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        ttl = settings.AGENTOPS_SWEEP_SECONDS * 3
        failures = RepeatedFailureLog(logger, "sweep")
        while not stop.is_set():
            close_old_connections()
            pause = settings.AGENTOPS_SWEEP_SECONDS
            try:
                if acquire_maintenance_lease("sweeper", actor, ttl):
                    report = sweep_once(actor)
                    if report.total:
                        self.stdout.write(f"swept: {report.counts}")
                    # Wake when the next timer, deadline or schedule tick falls due.
                    pause = seconds_until_due(pause)
                failures.succeeded()
            except Exception as exc:  # noqa: BLE001 - the database or Redis is away for a while
                # A sweep is idempotent: the next round redoes whatever this one lost.
                failures.failed(exc)
                connection.close()
            stop.wait(pause)
