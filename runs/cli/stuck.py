"""``runs stuck [--json]``: runs the watchdog flagged (no event for longer than
``AGENTOPS_STUCK_SECONDS`` while RUNNING or WAITING_EXTERNAL)."""

import json

from runs.engine.execution.watchdog import stuck_runs

help = "list runs flagged as stuck by the watchdog"


def add_arguments(parser):
    parser.add_argument("--json", action="store_true", help="print one JSON array")


def handle(command, options):
    rows = [
        {
            "run_id": str(r.pk),
            "workflow": r.workflow,
            "status": r.status,
            "stuck_since": r.stuck_since.isoformat(),
            "last_event_at": r.last_event_at.isoformat() if r.last_event_at else None,
        }
        for r in stuck_runs()
    ]
    if options["json"]:
        command.stdout.write(json.dumps(rows))
        return
    if not rows:
        command.stdout.write("no stuck runs")
    for r in rows:
        command.stdout.write(
            f"{r['run_id']} {r['workflow']} {r['status']} stuck since "
            f"{r['stuck_since']} (last event {r['last_event_at']})"
        )
