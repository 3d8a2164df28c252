"""The raw baselines' code, free of Django so that RQ workers and spawned processes
import nothing else: the no-op RQ job and the single-row UPDATE loop."""

import time


def noop() -> None:
    """A job that does no work, so the queue's own overhead is what is measured."""


def pg_writer(url: str, row: int, start_at: float, seconds: float) -> int:
    """From ``start_at`` (epoch seconds) for ``seconds``, run ``UPDATE rawbench SET n = n
    + 1 WHERE id = row`` in autocommit (one transaction each); returns how many."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        count = 0
        while time.time() < start_at:
            time.sleep(0.005)
        stop = start_at + seconds
        while time.time() < stop:
            conn.execute("UPDATE rawbench SET n = n + 1 WHERE id = %s", (row,))
            count += 1
    return count
