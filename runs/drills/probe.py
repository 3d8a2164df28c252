"""Run a management command (the worker) while counting its database work.

``python -m runs.drills.probe OUT.json worker --mode rq`` runs ``manage.py worker ...``
and, when the process exits (SIGTERM makes the worker finish its step and return),
writes ``{"statements", "transactions", "explicit_commits", "autocommit_statements",
"round_trips", "steps", "max_rss_kb"}`` to OUT.json. Counted, not estimated:

- every SQL statement sent through Django's cursors (all threads);
- transactions = explicit commits (``atomic`` blocks) + statements run in autocommit
  mode (each its own transaction);
- round trips = statements + 2 per explicit transaction (psycopg sends BEGIN and COMMIT
  as their own round trips).
"""

import atexit
import json
import os
import resource
import sys
import threading

COUNTS = {"statements": 0, "explicit_commits": 0, "autocommit_statements": 0}
_lock = threading.Lock()


def _install() -> None:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper

    def counted(method):
        def wrapper(self, *args, **kwargs):
            with _lock:
                COUNTS["statements"] += 1
                if self.db.get_autocommit():
                    COUNTS["autocommit_statements"] += 1
            return method(self, *args, **kwargs)

        return wrapper

    CursorWrapper._execute = counted(CursorWrapper._execute)
    CursorWrapper._executemany = counted(CursorWrapper._executemany)
    original_commit = BaseDatabaseWrapper.commit

    def commit(self):
        with _lock:
            COUNTS["explicit_commits"] += 1
        return original_commit(self)

    BaseDatabaseWrapper.commit = commit


def report() -> dict:
    """The counts so far, with derived totals, steps executed and peak RSS (KiB)."""
    from runs.engine.execution import identity

    current = identity._current
    return {
        **COUNTS,
        "transactions": COUNTS["explicit_commits"] + COUNTS["autocommit_statements"],
        "round_trips": COUNTS["statements"] + 2 * COUNTS["explicit_commits"],
        "steps": current.executed if current else 0,
        "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def main() -> None:
    out, args = sys.argv[1], sys.argv[2:]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    import django

    django.setup()
    _install()

    def write() -> None:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump(report(), fh)

    atexit.register(write)
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", *args])


if __name__ == "__main__":
    main()
