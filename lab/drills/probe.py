"""Run a management command (the worker) while counting its database work.

``python -m lab.drills.probe OUT.json worker --mode rq`` runs ``manage.py worker ...``
and, when the process exits (SIGTERM makes the worker finish its step and return),
writes ``{"statements", "transactions", "explicit_commits", "autocommit_statements",
"round_trips", "steps", "max_rss_kb", "cpu_s", "cpu_s_working"}`` to OUT.json. Counted,
not estimated:

- every SQL statement sent through Django's cursors (all threads);
- transactions = explicit commits (``atomic`` blocks) + statements run in autocommit
  mode (each its own transaction);
- round trips = statements + 2 per explicit transaction (psycopg sends BEGIN and COMMIT
  as their own round trips);
- CPU seconds (user + system) of the whole process (``cpu_s``) and from the start of
  its first step chain to its exit (``cpu_s_working``: without Django's start-up and
  the worker's registration and recovery);
- the longest time one thread spent in one Redis connect, send or reply read
  (``redis_max_wait_s``, any thread, RQ's own calls included).
"""

import atexit
import json
import os
import resource
import sys
import threading
import time

COUNTS = {"statements": 0, "explicit_commits": 0, "autocommit_statements": 0}
REDIS_WAITS = {"max_s": 0.0}
_lock = threading.Lock()
#: Process CPU seconds when the first step chain began (``None`` before).
_cpu_at_first_chain: list[float] = []


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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

    # The stubs leave out these private methods, which every statement goes through.
    CursorWrapper._execute = counted(CursorWrapper._execute)  # type: ignore[attr-defined]
    CursorWrapper._executemany = counted(CursorWrapper._executemany)  # type: ignore[attr-defined]
    original_commit = BaseDatabaseWrapper.commit

    def commit(self):
        with _lock:
            COUNTS["explicit_commits"] += 1
        return original_commit(self)

    # Counting patch for the probe's own process; mypy forbids assigning to a method.
    BaseDatabaseWrapper.commit = commit  # type: ignore[method-assign]

    from runs.engine.execution import executor

    original_chain = executor.run_chain

    def run_chain(*args, **kwargs):
        if not _cpu_at_first_chain:
            _cpu_at_first_chain.append(_cpu_s())
        return original_chain(*args, **kwargs)

    executor.run_chain = run_chain
    _time_redis_calls()


def _time_redis_calls() -> None:
    from redis.connection import AbstractConnection

    def timed(method):
        def wrapper(*args, **kwargs):
            started = time.monotonic()
            try:
                return method(*args, **kwargs)
            finally:
                waited = time.monotonic() - started
                with _lock:
                    REDIS_WAITS["max_s"] = max(REDIS_WAITS["max_s"], waited)

        return wrapper

    for name in ("connect", "send_packed_command", "read_response"):
        setattr(AbstractConnection, name, timed(getattr(AbstractConnection, name)))


def report() -> dict:
    """The counts so far, with derived totals, steps executed and peak RSS (KiB)."""
    from runs.engine.execution import identity

    current = identity._current
    cpu = _cpu_s()
    return {
        **COUNTS,
        "transactions": COUNTS["explicit_commits"] + COUNTS["autocommit_statements"],
        "round_trips": COUNTS["statements"] + 2 * COUNTS["explicit_commits"],
        "steps": current.executed if current else 0,
        "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "cpu_s": round(cpu, 3),
        "cpu_s_working": round(cpu - _cpu_at_first_chain[0], 3) if _cpu_at_first_chain else 0.0,
        "redis_max_wait_s": round(REDIS_WAITS["max_s"], 3),
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
