"""``python manage.py sweeper [--once]``: recover lost notifications and expired leases."""

import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand

from agentops.db_session import use_process_kind
from runs.engine.execution import sweeper
from runs.engine.execution.identity import new_worker_id


class Command(BaseCommand):
    help = "Run the sweeper loop (or one pass with --once)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one pass, then exit")

    def handle(self, *args, once: bool, **options):
        use_process_kind("worker")
        actor = f"sweeper:{new_worker_id()}"
        if once:
            report = sweeper.sweep_once(actor)
            self.stdout.write(f"swept: {report.counts}")
            return
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        ttl = settings.AGENTOPS_SWEEP_SECONDS * 3
        while not stop.is_set():
            if sweeper.acquire_maintenance_lease("sweeper", actor, ttl):
                report = sweeper.sweep_once(actor)
                if report.total:
                    self.stdout.write(f"swept: {report.counts}")
            stop.wait(settings.AGENTOPS_SWEEP_SECONDS)
