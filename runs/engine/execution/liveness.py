"""Worker liveness: peers learn that a step's owner died from the database, not the clock.

The lease (``AGENTOPS_LEASE_SECONDS``, 30 s) makes a dead worker's step claimable only
after it expires. Liveness shortens that to about ``AGENTOPS_LIVENESS_SECONDS``:

- **PostgreSQL** (``WorkerProcess.liveness = "pg"``): each worker holds a session
  advisory lock ``(LOCK_NAMESPACE, WorkerProcess.pk)`` on a dedicated connection for its
  whole life. When its process dies, its socket closes and the server releases the lock
  at once; a RUNNING step whose owner's lock no session holds is released back to
  PENDING (event ``lease.owner_dead``) and re-notified. A server restart drops every
  lock, the live workers' too, so for ``AGENTOPS_LIVENESS_GRACE_SECONDS`` after the
  server started (``pg_postmaster_start_time()``) a worker that started before it is not
  judged by its lock: the live ones take theirs again on their next check, and the
  lease decides meanwhile.
- **SQLite** (``"pid"``): the owner's process, on this host, no longer exists (or is a
  zombie).
- Otherwise (``""``): no signal; the lease decides.

What the lock shows, and what it cannot:

- **A dead process** (SIGKILL, OOM kill, crash): its kernel closes its sockets, the
  server ends the session and releases the lock at once; peers retake its steps within
  ``AGENTOPS_LIVENESS_SECONDS``.
- **A cut link** (a partition: packets dropped, no reset): the server cannot tell a
  silent client from a slow one. It ends the session, and releases the lock, only when
  its own TCP keepalives or ``tcp_user_timeout`` give up on the client (about 10 s with
  the server settings docs/deploy.md gives; with PostgreSQL's defaults, up to hours).
  Until then the cut worker counts as alive and its steps wait; after it, they are
  retaken even though the worker lives. The cut worker's own connections end on the
  client-side bounds (``DATABASES`` OPTIONS: keepalives, ``tcp_user_timeout``), its
  steps stop at their next safe point, and on reconnecting it takes its lock again.
- **A stopped or hung process** (SIGSTOP, a deadlock, a host frozen while its kernel
  still answers TCP): the kernel keeps acknowledging, so the session and the lock
  live on; the lease (``AGENTOPS_LEASE_SECONDS``) is the fallback for it.

Safety does not rest on the signal: the release is a conditional UPDATE fenced on the
attempt and owner seen, and a worker that is alive but was cut off from the database
finds its later writes rejected by the attempt fence (``step.commit_rejected``).

Session locks need a session. Behind a transaction-pooling proxy (PgBouncer in
transaction mode) consecutive statements may run on different server sessions, and a
lock taken on one stays with that server session whoever uses it next. ``LockKeeper``
checks that the lock is visible in ``pg_locks`` as held by the backend it is talking
to, on the same backend twice, and re-checks on every renewal; when that fails it turns
liveness off for this worker (``liveness = ""``) with a warning, so peers judge it by
its lease only.
"""

import logging
import os
import socket
import threading
import time

from django.conf import settings
from django.db import connection
from django.db.models import BooleanField, DateTimeField, F, Q
from django.db.models.expressions import RawSQL

from agentops import db_pool
from agentops.db_pool import release_connection
from runs.engine.execution import dispatch, sweeper
from runs.engine.execution.failure_log import RepeatedFailureLog
from runs.engine.state import leases
from runs.engine.state.gateway import run_transaction
from runs.models import Step, WorkerProcess
from runs.states import RUN_EXECUTABLE, StepStatus

logger = logging.getLogger("agentops.liveness")

#: First key of every worker's advisory lock (``pg_advisory_lock(int4, int4)``); the
#: second is the worker's ``WorkerProcess.pk``. "AGOP" in ASCII.
LOCK_NAMESPACE = 0x41474F50

PG = "pg"
PID = "pid"
OFF = ""

#: The advisory locks of this database's workers, as ``pg_locks`` shows them.
_HELD_LOCKS_SQL = (
    "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND classid = %s::oid AND objsubid = 2 "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
_HOLDER_SQL = (
    "SELECT pg_backend_pid(), array(SELECT pid FROM pg_locks WHERE locktype = 'advisory' "
    "AND granted AND classid = %s::oid AND objid = %s::oid AND objsubid = 2 "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
)
#: True once the server has been up longer than the grace (seconds) after a restart.
_PAST_RESTART_GRACE_SQL = "now() - pg_postmaster_start_time() > make_interval(secs => %s)"
_SERVER_START_SQL = "pg_postmaster_start_time()"


def pid_alive(pid: int) -> bool:
    """True when process ``pid`` exists on this host and is not a zombie (a killed child
    its parent has not reaped yet is dead for our purpose)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class LockKeeper:
    """Holds this worker's session advisory lock on a dedicated PostgreSQL connection.

    ``acquire()`` returns whether the lock is held and verified (``False`` behind a
    transaction-pooling proxy, or when the database is away); ``renew()`` re-checks it
    and takes it again on a new connection after the connection was cut; ``pooled`` is
    set once the lock was found not to hold on our session. Never raises for database
    errors.
    """

    def __init__(self, worker_pk: int, worker_id: str):
        self.worker_pk = worker_pk
        self.worker_id = worker_id
        self.pooled = False
        self._conn = None

    def _connect(self):
        import psycopg

        params = connection.get_connection_params()
        for key in ("cursor_factory", "context", "prepare_threshold", "client_encoding"):
            params.pop(key, None)
        params["application_name"] = db_pool.application_name("liveness", self.worker_id)
        # The link bounds (keepalives, tcp_user_timeout, connect_timeout) come with
        # the settings' OPTIONS: a cut link ends this session, and the lock, in seconds.
        params.setdefault("connect_timeout", 10)
        return psycopg.connect(**params, autocommit=True)

    def _verified(self, conn) -> bool:
        """Take the lock and check, twice, that ``pg_locks`` shows it held by exactly the
        backend this connection talks to."""
        key = (LOCK_NAMESPACE, self.worker_pk)
        row = conn.execute("SELECT pg_try_advisory_lock(%s, %s), pg_backend_pid()", key).fetchone()
        if not row[0]:
            return False
        for _ in range(2):
            backend, holders = conn.execute(_HOLDER_SQL, key).fetchone()
            if backend != row[1] or holders != [backend]:
                return False
        return True

    def acquire(self) -> bool:
        """Open the dedicated connection and take the lock; ``True`` when verified."""
        self.close()
        try:
            conn = self._connect()
        except Exception:  # noqa: BLE001 - database away: no liveness until renew() succeeds
            logger.warning("liveness: cannot connect for worker %s", self.worker_id)
            return False
        try:
            held = self._verified(conn)
        except Exception:  # noqa: BLE001 - connection cut mid-check: try again at renew()
            conn.close()
            return False
        if not held:
            conn.close()
            self.pooled = True
            logger.warning(
                "liveness off for worker %s: its session advisory lock does not hold on "
                "its own session (a transaction-pooling proxy such as PgBouncer in "
                "transaction mode?); a dead worker's steps wait for their lease",
                self.worker_id,
            )
            return False
        self._conn = conn
        return True

    def renew(self) -> bool:
        """Check the lock is still ours; reconnect and take it again if the connection
        was cut. Returns whether it is held now."""
        if self.pooled:
            return False
        if self._conn is not None:
            try:
                backend, holders = self._conn.execute(
                    _HOLDER_SQL, (LOCK_NAMESPACE, self.worker_pk)
                ).fetchone()
                if holders == [backend]:
                    return True
            except Exception:  # noqa: BLE001 - cut connection: reconnect below
                logger.warning("liveness: lock connection of %s lost", self.worker_id)
        return self.acquire()

    def close(self) -> None:
        """Close the dedicated connection (the server releases the lock with it)."""
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass
            self._conn = None


def _lock_released():
    """Workers with the "pg" signal whose advisory lock no session holds, leaving out
    those that started before the server did while the restart grace lasts."""
    grace = float(settings.AGENTOPS_LIVENESS_GRACE_SECONDS)
    return (
        WorkerProcess.objects.alias(
            settled=RawSQL(_PAST_RESTART_GRACE_SQL, [grace], output_field=BooleanField()),
            server_start=RawSQL(_SERVER_START_SQL, [], output_field=DateTimeField()),
        )
        .filter(Q(started_at__gt=F("server_start")) | Q(settled=True), liveness=PG)
        .exclude(pk__in=RawSQL(_HELD_LOCKS_SQL, [LOCK_NAMESPACE]))
    )


def dead_owner_steps(
    batch: int, *, exclude_owner: str = "", step_id: int | None = None
) -> list[tuple]:
    """RUNNING steps of executable runs whose owner is known to be dead:
    ``[(step_id, run_id, attempt, owner, signal)]``, at most ``batch`` (only step
    ``step_id`` when given), ``signal`` being ``"pg"`` or ``"pid"``. PostgreSQL judges
    owners with the "pg" signal, other databases owners with the "pid" signal on this
    host. Bounded: starts from the RUNNING steps (index ``step_status_lease``) and reads
    ``pg_locks`` once."""
    running = Step.objects.filter(status=StepStatus.RUNNING, run__status__in=RUN_EXECUTABLE)
    if step_id is not None:
        running = running.filter(pk=step_id)
    if exclude_owner:
        running = running.exclude(owner=exclude_owner)
    columns = ("pk", "run_id", "attempt", "owner")
    if connection.vendor == "postgresql":
        dead = _lock_released().values("worker_id")
        return [(*row, PG) for row in running.filter(owner__in=dead).values_list(*columns)[:batch]]
    local = WorkerProcess.objects.filter(liveness=PID, host=socket.gethostname())
    rows = list(running.filter(owner__in=local.values("worker_id")).values_list(*columns)[:batch])
    if not rows:
        return []
    pids = dict(local.filter(worker_id__in={r[3] for r in rows}).values_list("worker_id", "pid"))
    return [(*row, PID) for row in rows if not pid_alive(pids[row[3]])]


def dead_workers(workers: list[WorkerProcess]) -> dict[int, str]:
    """Which of ``workers`` (not stopped) their liveness signal shows dead, and how:
    ``{pk: reason}`` with reason ``"advisory lock released"`` (PostgreSQL, outside the
    restart grace) or ``"pid N is gone"`` (SQLite, same host). Workers without a signal,
    or on another host, are absent (their heartbeat age is all there is). Reads
    ``pg_locks`` once."""
    if connection.vendor == "postgresql":
        pg = [w.pk for w in workers if w.liveness == PG]
        if not pg:
            return {}
        dead = _lock_released().filter(pk__in=pg).values_list("pk", flat=True)
        return dict.fromkeys(dead, "advisory lock released")
    host = socket.gethostname()
    return {
        w.pk: f"pid {w.pid} is gone"
        for w in workers
        if w.liveness == PID and w.host == host and not pid_alive(w.pid)
    }


def release_dead_owners(
    actor: str, batch: int, *, exclude_owner: str = "", step_id: int | None = None
) -> int:
    """Release the steps of dead owners (only step ``step_id`` when given) back to
    PENDING, each fenced on the attempt and owner seen, with a ``lease.owner_dead``
    event, and notify workers. Returns how many. A sweeper task; idle workers call it
    too, and ``runs resume`` for the step it would otherwise wait for."""
    if not settings.AGENTOPS_LIVENESS:
        return 0
    done = 0
    for dead_step_id, run_id, attempt, owner, signal in dead_owner_steps(
        batch, exclude_owner=exclude_owner, step_id=step_id
    ):
        with run_transaction(run_id) as tx:
            released = leases.hand_back(
                tx,
                dead_step_id,
                attempt,
                actor=actor,
                event_type="lease.owner_dead",
                payload={"attempt": attempt, "owner": owner, "signal": signal},
                only_if=Q(owner=owner),
            )
            if released:
                dispatch.notify_on_commit(run_id, dead_step_id, attempt)
                done += 1
    return done


class Liveness:
    """A worker's side of liveness: publish how peers can tell it is alive, and watch
    for dead peers.

    ``start()`` (after the worker registered) takes the advisory lock on PostgreSQL, or
    uses the pid on SQLite, records the signal on the ``WorkerProcess`` row, and starts
    a daemon thread that every ``AGENTOPS_LIVENESS_SECONDS`` releases dead owners' steps
    and expired leases, and now and then renews the lock (on every tick while it is not
    held, so that after a database outage the lock is back within the restart grace).
    ``stop()`` ends the thread and drops the lock (last, after the worker's steps are
    saved).
    """

    #: Seconds between checks that our own lock still holds.
    RENEW_SECONDS = 5.0

    def __init__(self, worker_pk: int, worker_id: str):
        self.worker_pk = worker_pk
        self.worker_id = worker_id
        self.kind = OFF
        self.keeper: LockKeeper | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """Publish the signal and start watching; returns the signal kind in use."""
        if not settings.AGENTOPS_LIVENESS:
            return OFF
        if connection.vendor == "postgresql":
            self.keeper = LockKeeper(self.worker_pk, self.worker_id)
            self.kind = PG if self.keeper.acquire() else OFF
        elif connection.vendor == "sqlite":
            self.kind = PID
        self._publish()
        self._thread = threading.Thread(target=self._loop, name="liveness", daemon=True)
        self._thread.start()
        return self.kind

    def _publish(self) -> None:
        WorkerProcess.objects.filter(pk=self.worker_pk).update(liveness=self.kind)

    def _loop(self) -> None:
        last_renew = time.monotonic()
        held = True
        failures = RepeatedFailureLog(logger, "liveness check")
        try:
            while not self._stop.wait(settings.AGENTOPS_LIVENESS_SECONDS):
                try:
                    if self.keeper is not None and (
                        not held or time.monotonic() - last_renew >= self.RENEW_SECONDS
                    ):
                        last_renew = time.monotonic()
                        held = self.keeper.renew()
                        if self.keeper.pooled and self.kind == PG:
                            self.kind = OFF
                            self._publish()
                        elif held and self.kind == OFF and not self.keeper.pooled:
                            self.kind = PG
                            self._publish()
                    batch = settings.AGENTOPS_SWEEP_BATCH
                    release_dead_owners(self.worker_id, batch, exclude_owner=self.worker_id)
                    # The fallback for a hung owner, checked as often: a step waits for
                    # its lease, not for the next periodic sweep.
                    sweeper.reclaim_expired_leases(self.worker_id, batch)
                    failures.succeeded()
                except Exception as exc:  # noqa: BLE001 - database away: try again next tick
                    failures.failed(exc)
                    connection.close()
                    held = False
                release_connection()
        finally:
            connection.close()

    def stop(self) -> None:
        """Stop watching and release the lock."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=settings.AGENTOPS_LIVENESS_SECONDS + 10)
        if self.keeper is not None:
            self.keeper.close()
