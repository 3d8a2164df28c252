"""``python manage.py workers [--json]``: live worker processes, the step each holds and
the lease left on it (database clock), the dead ones that never recorded their stop
(and what they still hold), and the recently stopped ones."""

import json

from runs.cli.command import OperatorCommand
from runs.console.workforce import workforce


def _iso(value):
    return value.isoformat() if value else None


def _row(worker, now) -> dict:
    return {
        "worker_id": worker.worker_id,
        "host": worker.host,
        "pid": worker.pid,
        "mode": worker.mode,
        "queues": worker.queues,
        "heartbeat_age_s": round(worker.heartbeat_age, 1),
        "silent": worker.silent,
        "holds": [
            {
                "run_id": str(s.run_id),
                "workflow": s.run.workflow,
                "step": s.name,
                "attempt": s.attempt,
                "lease_left_s": round((s.lease_until - now).total_seconds(), 1)
                if s.lease_until
                else None,
            }
            for s in worker.held_steps
        ],
    }


class Command(OperatorCommand):
    help = "Show what the workers are doing: who holds which step, and the lease left."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **options):
        team = workforce()
        live = [_row(w, team.now) for w in team.live]
        dead = [_row(w, team.now) | {"dead": w.dead_reason} for w in team.dead]
        stopped = [
            {"worker_id": w.worker_id, "mode": w.mode, "stopped_at": _iso(w.stopped_at)}
            for w in team.stopped
        ]
        if options["json"]:
            self.stdout.write(json.dumps({"live": live, "dead": dead, "stopped": stopped}))
            return
        if not live:
            self.stdout.write("no live workers (start one: python manage.py worker)")
        for w in live:
            self._write(w, " SILENT" if w["silent"] else "", "")
        if dead:
            self.stdout.write(f"dead, never recorded a stop: {len(dead)}")
        for w in dead:
            self._write(w, f" DEAD ({w['dead']})", ", owner dead")
        if stopped:
            self.stdout.write(f"recently stopped: {len(stopped)}")
            for w in stopped[:5]:
                self.stdout.write(f"  {w['worker_id']} ({w['mode']}) stopped {w['stopped_at']}")

    def _write(self, w: dict, flag: str, owner: str) -> None:
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
                f"attempt {h['attempt']}, {lease}{owner}"
            )
        if not w["holds"]:
            self.stdout.write("  idle")
