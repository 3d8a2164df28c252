"""``python manage.py serve [--host H] [--port P] [--workers N]``: the ASGI server
(uvicorn) for the API, its SSE streams and the console.

It replaces itself with ``python -m uvicorn agentops.asgi:application`` (same pid, so a
supervisor's signals reach uvicorn directly), with persistent database connections
off as ASGI requires.
"""

import os
import sys

from runs.cli import arguments
from runs.cli.terminal import TerminalSafeCommand


class Command(TerminalSafeCommand):
    help = "Serve AgentOps over ASGI with uvicorn (API, SSE, console)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--host",
            default="127.0.0.1",
            type=arguments.required_text,
            help="address to listen on (default 127.0.0.1)",
        )
        parser.add_argument(
            "--port", type=arguments.port, default=8000, help="TCP port to listen on (default 8000)"
        )
        parser.add_argument(
            "--workers", type=arguments.integer(1, 64), default=1, help="uvicorn worker processes"
        )
        parser.add_argument(
            "--log-level",
            default="warning",
            type=arguments.required_text,
            help="uvicorn's log level (default warning)",
        )

    def handle(self, *args, **options):
        argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "agentops.asgi:application",
            "--host",
            options["host"],
            "--port",
            str(options["port"]),
            "--workers",
            str(options["workers"]),
            "--log-level",
            options["log_level"],
            # SSE clients must not wait for the stream to end on shutdown.
            "--timeout-graceful-shutdown",
            "5",
        ]
        env = dict(os.environ, AGENTOPS_CONN_MAX_AGE="0")
        sys.stdout.flush()
        os.execve(sys.executable, argv, env)
