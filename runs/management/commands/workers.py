"""``python manage.py workers [--json]``: live worker processes, the step each holds and
the lease left on it (database clock), and the recently stopped ones."""

import json

from django.core.management.base import BaseCommand

from runs.console.workforce import workforce


def _iso(value):
    return value.isoformat() if value else None


class Command(BaseCommand):
    help = "Show what the workers are doing: who holds which step, and the lease left."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **options):
        team = workforce()
        live = [
            {
                "worker_id": w.worker_id,
                "host": w.host,
                "pid": w.pid,
                "mode": w.mode,
                "queues": w.queues,
                "heartbeat_age_s": round(w.heartbeat_age, 1),
                "silent": w.silent,
                "holds": [
                    {
                        "run_id": str(s.run_id),
                        "workflow": s.run.workflow,
                        "step": s.name,
                        "attempt": s.attempt,
                        "lease_left_s": round((s.lease_until - team.now).total_seconds(), 1)
                        if s.lease_until
                        else None,
                    }
                    for s in w.held_steps
                ],
            }
            for w in team.live
        ]
        stopped = [
            {"worker_id": w.worker_id, "mode": w.mode, "stopped_at": _iso(w.stopped_at)}
            for w in team.stopped
        ]
        if options["json"]:
            self.stdout.write(json.dumps({"live": live, "stopped": stopped}))
            return
        if not live:
            self.stdout.write("no live workers (start one: python manage.py worker)")
        for w in live:
            flag = " SILENT" if w["silent"] else ""
            self.stdout.write(
                f"{w['worker_id']} ({w['mode']}, pid {w['pid']}) heartbeat "
                f"{w['heartbeat_age_s']:.0f}s ago{flag}"
            )
            for h in w["holds"]:
                left = h["lease_left_s"]
                lease = "no lease" if left is None else f"lease {left:.0f}s left"
                if left is not None and left < 0:
                    lease = f"lease expired {-left:.0f}s ago"
                self.stdout.write(
                    f"  holds {h['run_id']} {h['workflow']}.{h['step']} "
                    f"attempt {h['attempt']}, {lease}"
                )
            if not w["holds"]:
                self.stdout.write("  idle")
        if stopped:
            self.stdout.write(f"recently stopped: {len(stopped)}")
            for w in stopped[:5]:
                self.stdout.write(f"  {w['worker_id']} ({w['mode']}) stopped {w['stopped_at']}")
