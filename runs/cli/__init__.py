"""Subcommands of ``python manage.py runs``. Each module defines ``help``,
``add_arguments(parser)`` and ``handle(command, options)``; list it in ``SUBCOMMANDS``."""

SUBCOMMANDS = {
    "list": "runs.cli.list",
    "start": "runs.cli.start",
    "status": "runs.cli.status",
    "resume": "runs.cli.resume",
    "context": "runs.cli.context",
    "message": "runs.cli.message",
    "policy": "runs.cli.policy",
    "checkpoints": "runs.cli.checkpoints",
    "cancel": "runs.cli.cancel",
    "pause": "runs.cli.pause",
    "stuck": "runs.cli.stuck",
    "resolve": "runs.cli.resolve",
    "budget": "runs.cli.budget",
    "replay": "runs.cli.replay",
    "signal": "runs.cli.signal",
    "deliver": "runs.cli.deliver",
}
