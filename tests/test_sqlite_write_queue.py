"""The embedded default's SQLite backend queues the threads of one process for the one
write lock (``agentops/sqlite_backend``): a transaction or an autocommit write that
finds another thread writing waits in the process's queue and goes on once that thread
commits, rolls back or closes its connection; the queue is never left held. In-process,
on a temporary SQLite file, each thread with its own connection as Django gives it."""

import threading

import pytest
from django.db import transaction
from django.db.utils import ConnectionHandler

from agentops.settings import SQLITE_OPTIONS
from agentops.sqlite_backend.base import writer_lock
from tests.support.waiting import wait_until


@pytest.fixture
def sqlite_file(tmp_path, monkeypatch, django_db_blocker):
    """``(connections, path)``: a ConnectionHandler on a fresh SQLite file with table
    ``t``; ``transaction.atomic()`` works on its connections."""
    path = str(tmp_path / "queue.sqlite3")
    handler = ConnectionHandler(
        {"default": {"ENGINE": "agentops.sqlite_backend", "NAME": path, "OPTIONS": SQLITE_OPTIONS}}
    )
    monkeypatch.setattr(transaction, "get_connection", lambda using=None: handler["default"])
    # Connecting needs pytest-django's blocker lifted; the suite's PostgreSQL is unused.
    with django_db_blocker.unblock():
        with handler["default"].cursor() as cur:
            cur.execute("CREATE TABLE t (who TEXT)")
        handler["default"].close()
        yield handler, path
        handler.close_all()


def _write(handler, who: str, hold: threading.Event | None = None, fail: bool = False) -> None:
    """One atomic insert of ``who``, held open until ``hold`` is set and rolled back by
    an error when ``fail``; then this thread's connection is closed."""
    conn = handler["default"]
    try:
        with transaction.atomic():
            with conn.cursor() as cur:
                cur.execute("INSERT INTO t VALUES (%s)", [who])
            if hold is not None:
                assert hold.wait(30)
            if fail:
                raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    finally:
        conn.close()


def _closed_mid_way(handler, who: str) -> None:
    """Insert ``who`` in a transaction, then close the connection without ending it."""
    conn = handler["default"]
    transaction.atomic().__enter__()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (%s)", [who])
    assert writer_lock(conn.settings_dict["NAME"]).locked()
    conn.close()


def _insert_autocommit(handler, who: str) -> None:
    conn = handler["default"]
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (%s)", [who])
    finally:
        conn.close()


def _rows(handler) -> list[str]:
    with handler["default"].cursor() as cur:
        cur.execute("SELECT who FROM t ORDER BY who")
        return [r[0] for r in cur.fetchall()]


def _started(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args)
    thread.start()
    return thread


def test_writers_of_one_process_queue_and_each_ending_hands_the_lock_on(sqlite_file):
    handler, path = sqlite_file
    queue = writer_lock(path)
    release = threading.Event()
    holder = _started(_write, handler, "a-holder", release)
    wait_until(queue.locked, what="the first transaction holds the write queue")
    # A transaction and an autocommit write of other threads wait in the queue.
    waiting = [_started(_write, handler, "b-txn"), _started(_insert_autocommit, handler, "c-auto")]
    reader = _started(_rows, handler)  # reads never queue
    reader.join(30)
    assert not reader.is_alive()
    assert all(t.is_alive() for t in waiting) and _rows(handler) == []
    release.set()
    for t in [holder, *waiting]:
        t.join(30)
    assert _rows(handler) == ["a-holder", "b-txn", "c-auto"]
    assert not queue.locked()

    # A rollback hands the queue on too, and so does closing a connection mid-way.
    _started(_write, handler, "d-failed", None, True).join(30)
    assert not queue.locked()
    _started(_closed_mid_way, handler, "e-closed").join(30)
    assert not queue.locked()
    assert _rows(handler) == ["a-holder", "b-txn", "c-auto"]
