"""Retrying a whole transaction after the database was busy or the connection was lost.

A worker's commit that hits a restarted server or a terminated session is not a failed
step: the transaction rolled back, so running it again from the start is safe, and the
attempt fence (``attempt`` and RUNNING in the WHERE clause) rejects it if another worker
took the step meanwhile. The same holds for a lock wait cut short by ``lock_timeout``.
"""

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.db import DatabaseError, connection

from runs.engine.state import db_faults

logger = logging.getLogger("agentops.reconnect")

T = TypeVar("T")

#: Seconds between tries, doubling up to the maximum.
RETRY_SECONDS = (0.2, 2.0)


def retry_transaction(
    fn: Callable[[list[str]], T], *, deadline: float, what: str = "transaction"
) -> T:
    """Run ``fn(faults)``, which opens and commits its own outermost transaction, and
    run it again after a busy or lost database (``db_faults``) until it succeeds or
    ``deadline`` seconds have passed (then the last error is raised). ``faults`` lists
    ``"<kind>: <error>"`` of every earlier try, so the successful try can record them
    (an event) in its own transaction. Other errors are raised at once, and so is every
    error inside an enclosing atomic block (its transaction is lost; only the outermost
    caller can retry)."""
    faults: list[str] = []
    give_up = time.monotonic() + deadline
    pause = RETRY_SECONDS[0]
    while True:
        try:
            return fn(faults)
        except DatabaseError as exc:
            kind = db_faults.classify(exc)
            if kind is None or connection.in_atomic_block or time.monotonic() >= give_up:
                raise
            faults.append(f"{kind}: {type(exc).__name__}: {str(exc).strip()[:300]}")
            logger.warning("%s failed (%s); retrying", what, faults[-1])
        if faults[-1].startswith(db_faults.LOST):
            # Drop the broken connection; the next query opens a new one.
            connection.close()
        time.sleep(min(pause, max(0.0, give_up - time.monotonic())))
        pause = min(pause * 2, RETRY_SECONDS[1])


def retry_write(fn: Callable[[], T], *, what: str, deadline: float | None = None) -> T:
    """Run ``fn()``, the write of what an outside call did (one autocommitted statement,
    or one transaction ``fn`` opens itself), and run it again after a busy or lost
    database for up to ``deadline`` seconds (default: one lease), backing off as
    ``retry_transaction`` does. The call has happened: dropping its outcome over a
    moment's lock or a reconnect would leave it unknown (or make the call again), so
    the write waits instead. ``fn`` must be safe to run again (a conditional UPDATE, a
    content-addressed insert). Returns what ``fn`` returns; past the deadline the last
    error is raised, other errors at once, and so is every error inside an enclosing
    atomic block (the outermost caller retries its whole transaction)."""
    limit = settings.AGENTOPS_LEASE_SECONDS if deadline is None else deadline
    return retry_transaction(lambda _faults: fn(), deadline=limit, what=what)
