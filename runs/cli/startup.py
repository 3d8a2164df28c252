"""What ``manage.py`` checks before a command runs and how it ends when stdout's reader
goes away. Each failure is one line on stderr and exit status 2, like a malformed
setting, instead of a traceback from deep inside the command."""

import os
import signal
import sys
from pathlib import Path

from django.conf import settings


def database_problem() -> str | None:
    """Why the SQLite database cannot be opened (its directory is missing, or it or its
    directory is not writable), or ``None``. PostgreSQL is judged by its server when a
    command connects; an in-memory SQLite database always opens."""
    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("sqlite3"):
        return None
    name = str(db["NAME"])
    if name == ":memory:" or name.startswith("file:"):
        return None
    path = Path(name)
    folder = path.parent
    if not folder.is_dir():
        return f"cannot open the SQLite database {path}: directory {folder} does not exist"
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            return f"cannot open the SQLite database {path}: not readable and writable"
    elif not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot create the SQLite database {path}: directory {folder} is not writable"
    return None


def stdout_closed() -> None:
    """End the process after a write to stdout found its reader gone (``| head``):
    quietly, with the status of a process killed by SIGPIPE, as other Unix tools end.
    Later flushes go to /dev/null so Python does not complain at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    # Python ignores SIGPIPE so that sockets raise instead; restore the default only now,
    # at the very end, to die of it.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
