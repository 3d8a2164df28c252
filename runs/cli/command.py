"""The base class of the short operator commands."""

from runs.cli.terminal import TerminalSafeCommand


class OperatorCommand(TerminalSafeCommand):
    """A command an operator runs many times a day to look at or act on runs, approvals,
    workers and tokens: it does not run Django's system checks first.

    The checks examine the code and the settings (models, URLs, admin, templates), which
    do not change between two commands of one deployment, and they were more than half of
    such a command's start-up: about 0.45 s of CPU on every ``runs list``. They still run
    where a deployment starts: ``migrate``, ``manage.py check --deploy``, and the
    long-running ``worker``, ``sweeper`` and ``serve``.
    """

    requires_system_checks: list[str] = []
