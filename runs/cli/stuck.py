"""``runs stuck [--json]``: runs the watchdog flagged (no event for longer than
``AGENTOPS_STUCK_SECONDS`` while RUNNING or WAITING_EXTERNAL)."""

from runs.cli.common import write_rows
from runs.engine.service import stuck_runs

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
    write_rows(command.stdout, rows, options, nothing="no stuck runs", lines=_lines)


def _lines(r: dict) -> list[str]:
    return [
        f"{r['run_id']} {r['workflow']} {r['status']} stuck since "
        f"{r['stuck_since']} (last event {r['last_event_at']})"
    ]
