"""``python manage.py demo``: the crash-and-resume story on whatever database and queue
are configured (the embedded SQLite + database polling by default).

A real worker subprocess runs the room_temperature workflow and dies with exit 75 just
before ``reply``; the status shows three messages and ``reply`` as the next step; a new
worker subprocess resumes it and only ``reply`` runs.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from runs.cli import arguments
from runs.cli.terminal import TerminalSafeCommand
from runs.engine.service import CRASH_EXIT_CODE, redispatch, run_status, start_run

QUESTION = "How warm is the living room?"


class Command(TerminalSafeCommand):
    help = "Run the room-temperature crash-and-resume demo end to end."

    def add_arguments(self, parser):
        parser.add_argument(
            "--thread",
            default=None,
            type=arguments.thread_id,
            help="thread id (default: demo-<time>)",
        )

    def handle(self, *args, thread: str | None, **options):
        out = self.stdout
        thread = thread or f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
        db = settings.DATABASES["default"]
        where = (
            db["NAME"]
            if db["ENGINE"].endswith("sqlite3")
            else f"{db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}"
        )
        out.write(
            f"== AgentOps demo: database {where}, dispatch "
            f"{'RQ (' + settings.REDIS_URL + ')' if settings.REDIS_URL else 'database polling'}"
        )
        call_command("migrate", verbosity=0, interactive=False)

        run = start_run(
            "room_temperature",
            thread_id=thread,
            input={"question": QUESTION},
            faults={"crash_before": "reply"},
            actor="demo",
        )
        out.write(f"\n1. started run {run.pk} on thread {thread}: {QUESTION!r}")
        out.write("   (fault injected: the worker will die just before the reply step)")

        out.write("\n2. worker #1 starts")
        code = self._worker()
        out.write(f"   worker #1 exited with {code}")
        if code != CRASH_EXIT_CODE:
            raise CommandError(
                f"expected the first worker to crash with {CRASH_EXIT_CODE}, got {code}"
            )

        status = run_status(run)
        out.write(f"\n3. after the crash: run {status['status']}, next step {status['next_step']}")
        self._messages(status)

        step = redispatch(run, actor="demo")
        out.write(
            f"\n4. resume: next step {step.name} dispatched from checkpoint "
            f"after:{status['steps'][-2]['name']}"
        )
        out.write("\n5. worker #2 starts")
        code = self._worker()
        out.write(f"   worker #2 exited with {code}")

        status = run_status(run)
        out.write(f"\n6. final: run {status['status']}")
        self._messages(status)
        for s in status["steps"]:
            out.write(f"   step {s['name']:<18} {s['status']:<10} attempt {s['attempt']}")
        reads = status["calls"].get("thermostat.read", 0)
        answer = status["messages"][-1]["content"] if status["messages"] else ""
        out.write(f"\nANSWER: {answer}")
        out.write(f"thermostat reads for this run: {reads}")
        if status["status"] != "SUCCEEDED" or reads != 1:
            raise CommandError(f"demo did not end as expected: {json.dumps(status['calls'])}")

    def _worker(self) -> int:
        manage = Path(settings.BASE_DIR) / "manage.py"
        proc = subprocess.Popen(
            [sys.executable, str(manage), "worker", "--burst"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        # stdout=PIPE: ``proc.stdout`` is set (typed Optional for other ways of starting).
        for line in proc.stdout or ():
            if line.startswith(("ENTER", "CRASH")):
                self.stdout.write("   " + line.rstrip())
        return proc.wait()

    def _messages(self, status: dict) -> None:
        self.stdout.write(f"   {len(status['messages'])} messages:")
        for m in status["messages"]:
            calls = "".join(
                f" -> calls {c['name']}({json.dumps(c['arguments'])}) [{c['id']}]"
                for c in m["tool_calls"]
            )
            reply_to = f" [answers {m['tool_call_id']}]" if m["tool_call_id"] else ""
            self.stdout.write(f"     {m['role']:<9} {m['content']}{calls}{reply_to}")
