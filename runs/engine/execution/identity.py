"""Who is executing: a worker id (``host:pid:suffix``), its dispatch mode, and a stop
flag set by SIGTERM so the worker claims nothing new."""

import os
import socket
import threading
import uuid
from dataclasses import dataclass, field


@dataclass
class WorkerIdentity:
    """A worker process's identity. ``stopping`` is set on SIGTERM/SIGINT."""

    worker_id: str
    mode: str
    stopping: threading.Event = field(default_factory=threading.Event)
    #: Steps this process has executed (claimed and run), for its exit line and stats.
    executed: int = 0
    _counting: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count_executed(self) -> None:
        """One more step executed (slot threads count at once)."""
        with self._counting:
            self.executed += 1


def new_worker_id() -> str:
    """``host:pid:random``; unique per process start."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


_current: WorkerIdentity | None = None


def set_current_worker(identity: WorkerIdentity) -> None:
    global _current
    _current = identity


def current_worker() -> WorkerIdentity:
    """The identity set by the worker command, or a fresh one for ad-hoc executors
    (e.g. a plain ``rqworker`` process)."""
    global _current
    if _current is None:
        from runs.engine.execution.dispatch import mode

        _current = WorkerIdentity(new_worker_id(), mode())
    return _current
