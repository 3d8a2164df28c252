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
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
