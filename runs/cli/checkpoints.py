"""``runs checkpoints (RUN_ID | --thread T) [--json]``: the checkpoints a run can resume from."""

import json

from runs.cli.common import add_run_arguments, resolve_run
from runs.engine.service import list_checkpoints

help = "list a run's checkpoints (resume with `runs resume RUN_ID --from NAME`)"


def add_arguments(parser):
    add_run_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON array")


def handle(command, options):
    rows = list_checkpoints(resolve_run(options))
    if options["json"]:
        command.stdout.write(json.dumps(rows))
        return
    for row in rows:
        flag = "resumable" if row["resumable"] else "-"
        command.stdout.write(
            f"{row['name']:<32} gen {row['generation']:<3} next "
            f"{row['next_step'] or '(end)':<22} {flag}"
        )
