#!/usr/bin/env python
"""Django's command-line utility for AgentOps."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    # A malformed setting is the operator's to fix: one line naming it, exit code 2
    # (a usage error), no traceback.
    try:
        import django

        django.setup()
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"configuration error: {exc}\n")
        sys.exit(2)
    from django.core.management.base import CommandError
    from django.db import OperationalError

    from runs.cli import arguments, startup

    startup.one_line_usage_errors()

    problem = startup.database_problem()
    if problem:
        sys.stderr.write(f"configuration error: DATABASE_URL: {problem}\n")
        sys.exit(2)
    try:
        arguments.check_argv(sys.argv)
    except CommandError as exc:
        sys.stderr.write(startup.usage_error_line(sys.argv, str(exc)))
        sys.exit(2)
    try:
        execute_from_command_line(sys.argv)
        sys.stdout.flush()
    except BrokenPipeError:
        startup.stdout_closed()
    except OperationalError as exc:
        line = startup.unreachable_database(exc)
        if line is None:
            raise
        sys.stderr.write(line + "\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
