"""The worker process: database polling or RQ, the same ``execute_step`` path either
way (DESIGN section 6).

Shape after healthchecks' ``sendalerts``: a loop around small ``handle_one()`` calls that
return whether they found work, sleeping only when they did not, with a stop flag set by
SIGTERM/SIGINT. On SIGTERM the worker claims nothing new, lets the current step finish
and save, and exits 0; correctness never depends on that (SIGKILL is survivable).
"""

import itertools
import logging
import os
import signal
import socket
import threading
import time

from django.conf import settings
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    connections,
)
from django.db.models import Q
from django.db.models.functions import Now

from runs.engine.execution import dispatch, executor, redis_link, sweeper
from runs.engine.execution.failure_log import RepeatedFailureLog
from runs.engine.execution.identity import WorkerIdentity, new_worker_id, set_current_worker
from runs.engine.execution.liveness import Liveness
from runs.models import Step, WorkerProcess
from runs.states import RUN_EXECUTABLE, StepStatus

logger = logging.getLogger("agentops.worker")


#: Seconds between checks whether Redis takes writes again, doubling up to the maximum
#: while it does not (a full Redis answers PING but refuses every write RQ needs).
REDIS_RETRY_SECONDS = (1.0, 30.0)


def _redis_refusal(conn, key: str) -> Exception | None:
    """``None`` when Redis accepts a write (a short-lived probe key), else the error."""
    try:
        conn.set(key, "1", ex=60)
    except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
        return exc
    return None


def _next_probe_delay(delay: float, refusal: Exception) -> float:
    """Seconds until Redis is asked again after ``refusal``. One that does not answer
    (timeout, connection lost or refused) is asked again after the shortest interval:
    a probe waits at most the Redis timeout, so this cannot spin, and RQ dispatch
    resumes within seconds of its return. One that answers but refuses writes (full)
    is asked at doubling intervals up to ``REDIS_RETRY_SECONDS[1]``: RQ would fail on
    it at once."""
    import redis

    if isinstance(refusal, redis.ConnectionError | redis.TimeoutError):
        return REDIS_RETRY_SECONDS[0]
    return min(delay * 2, REDIS_RETRY_SECONDS[1])


def _stop_pubsub(rq_worker) -> None:
    """Stop the command-listener thread of an RQ worker whose teardown failed (it would
    otherwise retry its Redis connection forever in the background)."""
    thread = getattr(rq_worker, "pubsub_thread", None)
    if thread is not None:
        thread.stop()
        thread.join(timeout=1)


def due_step_ids(limit: int = 10) -> list[int]:
    """Ids of steps a worker could claim now: PENDING and due, or RUNNING with an
    expired lease, in runs that may execute. Oldest ``not_before`` first."""
    return list(
        Step.objects.filter(
            Q(status=StepStatus.PENDING, not_before__lte=Now())
            | Q(status=StepStatus.RUNNING, lease_until__lt=Now()),
            run__status__in=RUN_EXECUTABLE,
        )
        .order_by("not_before")
        .values_list("pk", flat=True)[:limit]
    )


def rq_worker_class(identity: WorkerIdentity, *, fork: bool = False):
    """The RQ worker class for this process.

    Default: a non-forking ``SimpleWorker`` (DESIGN section 11: forking per job costs
    about 15x throughput). ``fork=True``: RQ's forking ``Worker``, where a work horse that
    exits with the injected-crash code takes the whole worker process down with the same
    code, as a real crash of the worker would. Either way a stop request (SIGTERM) also
    stops the engine's step chaining, and one that came before RQ installed its signal
    handlers stops RQ before its first dequeue.
    """
    from rq import SimpleWorker
    from rq import Worker as ForkingWorker

    base = ForkingWorker if fork else SimpleWorker

    class EngineRQWorker(base):  # type: ignore[valid-type,misc]  # base picked at run time
        # RQ blocks in BLPOP for worker_ttl - 15 s (405 s) and raises the connection's
        # read timeout above that; here no Redis call may outlast AGENTOPS_REDIS_TIMEOUT,
        # so the blocking dequeue waits half of it and the timeout stays as configured.
        @property
        def dequeue_timeout(self) -> float:
            return max(0.5, settings.AGENTOPS_REDIS_TIMEOUT / 2)

        @property
        def connection_timeout(self) -> float:
            return settings.AGENTOPS_REDIS_TIMEOUT

        def heartbeat(self, *args, **kwargs):
            import redis

            try:
                return super().heartbeat(*args, **kwargs)
            except redis.ConnectionError as exc:
                # RQ's dequeue loop would sleep and retry a lost connection for as
                # long as it lasts; RQ's work loop ends on a timeout instead, and the
                # engine works from the database until Redis is back.
                raise redis.TimeoutError(f"{type(exc).__name__}: {exc}") from exc

        def request_stop(self, signum, frame):
            identity.stopping.set()
            super().request_stop(signum, frame)

        def _install_signal_handlers(self):
            super()._install_signal_handlers()
            # A SIGTERM that came before RQ took the signals over (while it connected
            # and registered) reached only the engine's handler: RQ must stop too, or
            # it would block in its first dequeue for minutes.
            if identity.stopping.is_set():
                self._stop_requested = True

        def fork_work_horse(self, job, queue):
            # A forked child must not share the parent's database socket.
            connections.close_all()
            return super().fork_work_horse(job, queue)

        def wait_for_horse(self):
            retpid, ret_val, rusage = super().wait_for_horse()
            if (
                ret_val is not None
                and os.waitstatus_to_exitcode(ret_val) == executor.CRASH_EXIT_CODE
            ):
                os._exit(executor.CRASH_EXIT_CODE)
            return retpid, ret_val, rusage

    return EngineRQWorker


class Worker:
    """One worker process. ``mode``: ``"db"`` or ``"rq"``; ``burst``: exit when nothing
    is due (db) or the queue is empty (rq)."""

    def __init__(
        self,
        *,
        mode: str | None = None,
        queue: str = "default",
        burst: bool = False,
        fork: bool = False,
    ):
        self.mode = mode or dispatch.mode()
        self.queue = queue
        self.burst = burst
        #: RQ only: fork a work horse per job (RQ's default ``Worker``), for comparison.
        self.fork = fork
        self.identity = WorkerIdentity(new_worker_id(), self.mode)
        set_current_worker(self.identity)
        self._last_sweep = 0.0
        self._last_beat = 0.0

    @property
    def worker_id(self) -> str:
        return self.identity.worker_id

    def request_stop(self, signum=None, frame=None) -> None:
        """Stop claiming new work; the current step finishes first."""
        self.identity.stopping.set()

    # -- lifecycle --------------------------------------------------------------------
    def run(self) -> int:
        """Register, recover, work until stopped (or idle in burst mode); returns the
        number of steps executed."""
        # Before recovery: a SIGTERM during start-up must also be a graceful stop.
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        liveness = Liveness(self._register(), self.worker_id)
        liveness.start()
        try:
            self.recover()
            if self.mode == "rq":
                return self._run_rq()
            return self._run_db()
        finally:
            self._unregister()
            # Last: peers may re-claim this worker's steps once the lock is gone.
            liveness.stop()

    def recover(self) -> None:
        """Start-up recovery: reclaim expired leases and re-notify every due step."""
        report = sweeper.sweep_once(self.worker_id, force=True)
        if report.total:
            logger.info("startup recovery: %s", report.counts)

    def handle_one(self) -> int:
        """Claim and execute one due step (and the chain it leads to); returns the
        number of steps executed, 0 when nothing was claimable."""
        for step_id in due_step_ids():
            if self.identity.stopping.is_set():
                return 0
            executed = executor.run_chain(step_id, self.identity)
            if executed:
                return executed
        return 0

    def maintain(self) -> None:
        """Periodic duties: worker heartbeat row, and the sweeper when this process holds
        the sweeper's maintenance lease."""
        now = time.monotonic()
        if now - self._last_beat >= 2:
            WorkerProcess.objects.filter(worker_id=self.worker_id).update(heartbeat_at=Now())
            self._last_beat = now
        if now - self._last_sweep >= settings.AGENTOPS_SWEEP_SECONDS:
            self._last_sweep = now
            ttl = settings.AGENTOPS_SWEEP_SECONDS * 3
            if sweeper.acquire_maintenance_lease("sweeper", self.worker_id, ttl):
                sweeper.sweep_once(self.worker_id)

    def _run_db(self) -> int:
        total = 0
        outage = RepeatedFailureLog(logger, "database polling")
        while not self.identity.stopping.is_set():
            close_old_connections()
            try:
                executed = self.handle_one()
                total += executed
                outage.succeeded()
                if executed:
                    continue
                if self.burst:
                    break
                self.maintain()
            except (OperationalError, InterfaceError) as exc:
                # The database is away (restart, failover): keep polling until it is
                # back; a step cut off mid-way is recovered by its lease.
                outage.failed(exc)
                connection.close()
            except Exception:  # noqa: BLE001 - one step's trouble must never end the worker
                logger.exception("handling a step failed; the worker goes on")
                connection.close()
            self.identity.stopping.wait(settings.AGENTOPS_POLL_SECONDS)
        return total

    def _run_rq(self) -> int:
        """Work RQ notifications. RQ gives up when Redis goes away under it (stopped,
        restarted, flushed mid-job, full); the engine does not: until Redis takes a write
        again this worker claims due steps straight from the database (the queue only
        notifies), then starts a fresh RQ worker. Startup recovery and the sweeper
        re-notify what the outage lost."""
        import django_rq

        queue = django_rq.get_queue(self.queue)
        worker_class = rq_worker_class(self.identity, fork=self.fork)
        identity = self.identity
        maintenance = None
        if not self.burst:
            maintenance = threading.Thread(target=self._maintenance_loop, daemon=True)
            maintenance.start()
        probe_key = f"agentops:worker-probe:{self.worker_id}"
        delay = REDIS_RETRY_SECONDS[0]
        try:
            for round_no in itertools.count(1):
                # A fresh name per round: RQ refuses a second live worker of one name,
                # and the old registration may outlive an outage.
                name = self.worker_id if round_no == 1 else f"{self.worker_id}:r{round_no}"
                rq_worker = None
                started = time.monotonic()
                cause = "RQ stopped"
                link = redis_link.fail_fast_client(queue.connection)
                try:
                    # RQ's constructor talks to Redis already (CLIENT SETNAME, CLIENT LIST).
                    rq_queue = django_rq.get_queue(self.queue, connection=link)
                    rq_worker = worker_class([rq_queue], connection=rq_queue.connection, name=name)
                    rq_worker.work(burst=self.burst, with_scheduler=False, logging_level="WARNING")
                except Exception as exc:  # noqa: BLE001 - Redis errors escape RQ's start/teardown
                    cause = f"{type(exc).__name__}: {exc}"
                    if rq_worker is not None:
                        _stop_pubsub(rq_worker)
                if identity.stopping.is_set():
                    break
                # A link RQ gave up on is known dead: no probe needs to wait to say so.
                refused = redis_link.given_up(link) or _redis_refusal(queue.connection, probe_key)
                if self.burst and refused is None:
                    break
                # A round that lasted was a working RQ: the next outage starts afresh.
                if time.monotonic() - started > REDIS_RETRY_SECONDS[1]:
                    delay = REDIS_RETRY_SECONDS[0]
                # RQ installed its own handlers; ours must not raise inside a step.
                signal.signal(signal.SIGTERM, self.request_stop)
                signal.signal(signal.SIGINT, self.request_stop)
                # One warning per change of state, not per round: a full Redis made RQ
                # fail at once, ~75 times a second.
                logger.warning(
                    "Redis unavailable or refusing writes (%s); working from the database",
                    f"{type(refused).__name__}: {refused}" if refused else cause,
                )
                delay = self._work_from_db_until(
                    lambda: _redis_refusal(queue.connection, probe_key), delay
                )
                if self.burst or identity.stopping.is_set():
                    break
                logger.warning("Redis accepts writes again; back to RQ dispatch")
        finally:
            identity.stopping.set()
            if maintenance:
                maintenance.join(timeout=5)
        return identity.executed

    def _work_from_db_until(self, redis_refusal, delay: float) -> float:
        """Database polling until ``redis_refusal()`` is ``None`` (Redis takes writes),
        the worker is stopping, or (burst) nothing is due. ``redis_refusal`` is asked
        after ``delay`` seconds, then at the intervals ``_next_probe_delay`` gives;
        returns the next interval, so an RQ round that fails at once waits longer
        before the next."""
        next_check = time.monotonic() + delay
        while not self.identity.stopping.is_set():
            close_old_connections()
            try:
                if self.handle_one():
                    continue
            except Exception:  # noqa: BLE001 - one step's trouble must never end the worker
                logger.exception("handling a step failed; the worker goes on")
                connection.close()
            if self.burst:
                break
            if time.monotonic() >= next_check:
                refusal = redis_refusal()
                if refusal is None:
                    delay = min(delay * 2, REDIS_RETRY_SECONDS[1])
                    break
                delay = _next_probe_delay(delay, refusal)
                next_check = time.monotonic() + delay
            self.identity.stopping.wait(settings.AGENTOPS_POLL_SECONDS)
        return delay

    def _maintenance_loop(self) -> None:
        failures = RepeatedFailureLog(logger, "maintenance")
        try:
            while not self.identity.stopping.wait(1.0):
                try:
                    self.maintain()
                    failures.succeeded()
                except Exception as exc:  # noqa: BLE001 - keep sweeping after a transient DB/Redis error
                    failures.failed(exc)
                    # A connection cut under it stays broken: the next tick connects anew.
                    connection.close()
        finally:
            connection.close()

    def _register(self) -> int:
        """Create this worker's ``WorkerProcess`` row; returns its pk."""
        return WorkerProcess.objects.create(
            worker_id=self.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            mode=self.mode,
            queues=self.queue,
        ).pk

    def _unregister(self) -> None:
        try:
            WorkerProcess.objects.filter(worker_id=self.worker_id).update(stopped_at=Now())
        except Exception:  # noqa: BLE001 - best effort on the way out
            logger.warning("could not mark worker %s stopped", self.worker_id)
