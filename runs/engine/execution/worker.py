"""The worker process: database polling or RQ, the same ``execute_step`` path either
way, on up to ``concurrency`` execution slots (``slots.Slots``).

Shape after healthchecks' ``sendalerts``: a loop around small ``handle_one()`` calls that
return whether they found work, sleeping only when they did not, with a stop flag set by
SIGTERM/SIGINT. The loop takes work only while a slot is free: database polling asks
for as many due steps as there are free slots, RQ takes a notification only then. On
SIGTERM the worker claims nothing new, lets every slot's step finish and save, and
exits 0; correctness never depends on that (SIGKILL is survivable).
"""

import itertools
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import close_old_connections, connection, connections
from django.db.models.functions import Now

from agentops import db_pool
from runs.engine.effects import model_providers
from runs.engine.execution import dispatch, executor, progress, redis_link, sweeper
from runs.engine.execution.failure_log import RepeatedFailureLog
from runs.engine.execution.identity import WorkerIdentity, new_worker_id, set_current_worker
from runs.engine.execution.liveness import Liveness
from runs.engine.execution.slots import Slots
from runs.engine.state import db_faults
from runs.engine.state.leases import due_step_ids
from runs.engine.state.store import store
from runs.models import Step, WorkerProcess
from runs.workflows import registry

logger = logging.getLogger("agentops.worker")


class _RQTimeoutWording(logging.Filter):
    """RQ ends its work loop on a Redis timeout with the ERROR "Redis connection timeout,
    quitting...". This process does not quit: it works from the database until Redis is
    back, so the line is reworded and kept a warning (operators alert on ERROR)."""

    QUITTING = "Worker %s: Redis connection timeout, quitting..."

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == self.QUITTING:
            record.msg = "Worker %s: Redis connection timeout; RQ dispatch pauses"
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


logging.getLogger("rq.worker").addFilter(_RQTimeoutWording())


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


def _handling_failed(outage: RepeatedFailureLog, exc: Exception) -> None:
    """A polling round raised ``exc``. A database fault (``db_faults``: restart,
    failover, read-only, out of connections...) is an outage: one line per period while
    it lasts, the connection dropped so the next round reconnects; a step cut off
    mid-way is recovered by its lease. Anything else is logged with its traceback."""
    if db_faults.classify(exc) is not None:
        outage.failed(exc)
    else:
        logger.exception("handling a step failed; the worker goes on")
    connection.close()


def _notified_step(job) -> int | None:
    """The step id an engine notification names, or ``None`` for any other job (and for
    a notification whose arguments are not the engine's)."""
    if job.func_name != dispatch.JOB_FUNC:
        return None
    try:
        return int(job.args[1])
    except (IndexError, TypeError, ValueError):
        return None


def _claim_for_free_slots(claim_batch: Callable[[int], int], slots: Slots) -> None:
    """Fill ``slots``' free slots through ``claim_batch``. A failure (the database away)
    is logged and leaves the work to the notified step's own claim and the sweeper."""
    try:
        claim_batch(slots.free())
    except Exception as exc:  # noqa: BLE001 - the batch is a shortcut, never the only way
        logger.warning("batch claim on a notification failed: %s: %s", type(exc).__name__, exc)
        connection.close()
    finally:
        db_pool.release_connection()


def rq_worker_class(
    identity: WorkerIdentity,
    *,
    fork: bool = False,
    slots: Slots | None = None,
    claim_batch: Callable[[int], int] | None = None,
):
    """The RQ worker class for this process.

    Default: a non-forking ``SimpleWorker`` (forking per job costs about 15x
    throughput, measured). ``fork=True``: RQ's forking ``Worker``, where a work horse that
    exits with the injected-crash code takes the whole worker process down with the same
    code, as a real crash of the worker would. Either way a stop request (SIGTERM) also
    stops the engine's step chaining, and one that came before RQ installed its signal
    handlers stops RQ before its first dequeue.

    With threaded ``slots`` RQ stays the notifier: a notification is dequeued only while
    a slot is free. ``claim_batch(free)`` (claim up to ``free`` due steps at once with
    ``Store.claim_due`` and hand them to slots, returning how many) fills the free slots
    with the oldest due steps first, the notified one among them or not; the notified
    step then goes to a slot still free, whose own claim decides. The database is the
    truth: a due step the batch left is claimed by the next notification's batch or
    re-notified by the sweeper.
    """
    from rq import SimpleWorker
    from rq import Worker as ForkingWorker
    from rq.exceptions import StopRequested

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

        def _pubsub_exception_handler(self, exc, pubsub, pubsub_thread):
            # RQ's command listener runs on this round's Redis link. RQ retries a lost
            # connection there every 2 s and lets any other error (the fail-fast link's
            # TimeoutError) end the thread with a traceback; here the listener stops
            # with one line. A Redis error has tripped the link for the round's other
            # calls too, so the work loop ends, the worker works from the database, and
            # the next round's RQ worker listens afresh; any other error (a command it
            # cannot read) only stops the listener: the engine sends RQ no commands.
            logger.warning(
                "RQ command listener of %s stopped (%s: %s)", self.name, type(exc).__name__, exc
            )
            pubsub_thread.stop()

        #: True while a notification is being handed to a slot (see ``_shutdown``).
        _handing_over = False

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

        def dequeue_job_and_maintain_ttl(self, timeout, max_idle_time=None):
            if slots is None or not slots.threaded:
                return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
            while not slots.wait_free(1.0):
                self.heartbeat()
                if self._stop_requested:
                    return None
            while True:
                result = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
                if result is not None or timeout is not None or not slots.busy():
                    return result
                # Burst and the queue is empty while slots still run: what they notify
                # is still this burst's work.
                slots.drain()

        def execute_job(self, job, queue):
            step_id = _notified_step(job) if slots is not None and slots.threaded else None
            if slots is None or step_id is None:
                return super().execute_job(job, queue)
            self._handing_over = True
            try:
                # A notification carries ids only and is done once a slot has it: the
                # database is the truth, the slot's claim decides.
                job.delete(remove_from_queue=False)
                if identity.stopping.is_set():
                    return
                if claim_batch is not None:
                    _claim_for_free_slots(claim_batch, slots)
                if step_id not in slots.pending and slots.free():
                    slots.submit(step_id)
            finally:
                self._handing_over = False

        def _shutdown(self):
            if slots is None or not slots.threaded:
                return super()._shutdown()
            # RQ raises StopRequested from the signal handler when it is not busy; with
            # slots it is never "busy", so it must not raise in the middle of handing a
            # notification over (a slot counted busy that never started would hold the
            # drain forever). The work loop sees the flag at its next turn.
            self._stop_requested = True
            if not self._handing_over:
                raise StopRequested()

        def wait_for_horse(self):
            retpid, ret_val, rusage = super().wait_for_horse()
            if (
                ret_val is not None
                and os.waitstatus_to_exitcode(ret_val) == progress.CRASH_EXIT_CODE
            ):
                os._exit(progress.CRASH_EXIT_CODE)
            return retpid, ret_val, rusage

    return EngineRQWorker


class Worker:
    """One worker process. ``mode``: ``"db"`` or ``"rq"``; ``burst``: exit when nothing
    is due (db) or the queue is empty (rq); ``concurrency``: execution slots, steps run
    at once (default ``AGENTOPS_WORKER_CONCURRENCY``; ``ValueError`` below 1)."""

    def __init__(
        self,
        *,
        mode: str | None = None,
        queue: str = "default",
        burst: bool = False,
        fork: bool = False,
        concurrency: int | None = None,
    ):
        self.mode = mode or dispatch.mode()
        self.queue = queue
        self.burst = burst
        #: RQ only: fork a work horse per job (RQ's default ``Worker``), for comparison.
        self.fork = fork
        self.identity = WorkerIdentity(new_worker_id(), self.mode)
        set_current_worker(self.identity)
        size = settings.AGENTOPS_WORKER_CONCURRENCY if concurrency is None else concurrency
        self.slots = Slots(size, self._run_chain)
        self._last_sweep = 0.0
        self._last_beat = 0.0

    def _run_chain(self, step_id: int, claimed: Step | None) -> int:
        return executor.run_chain(step_id, self.identity, claimed)

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
        if self.slots.threaded:
            # Before any other thread connects: slots share a few pooled connections.
            db_pool.use_pool(
                settings.AGENTOPS_WORKER_POOL_SIZE,
                timeout=settings.AGENTOPS_LEASE_SECONDS,
                name=db_pool.application_name("worker", self.worker_id),
            )
        liveness = Liveness(self._register(), self.worker_id)
        liveness.start()
        try:
            # Before the first claim: a step's first model request must not pay for
            # loading the model's SDK, stalling every other slot's request meanwhile.
            model_providers.warm()
            self.recover()
            if self.mode == "rq":
                self._run_rq()
            else:
                self._run_db()
        finally:
            if self.slots.busy():
                progress.say(f"worker {self.worker_id} stopping: {self.slots.busy()} slot(s) busy")
            # Every slot finishes and saves before the worker says it stopped.
            self.slots.shutdown()
            self._unregister()
            # Last: peers may re-claim this worker's steps once the lock is gone.
            liveness.stop()
        # Counted after the shutdown: the steps the slots finished while it waited too.
        return self.identity.executed

    def recover(self) -> None:
        """Start-up recovery: reclaim expired leases and re-notify every due step."""
        report = sweeper.sweep_once(self.worker_id, force=True)
        if report.total:
            logger.info("startup recovery: %s", report.counts)

    def handle_one(self) -> int:
        """Take due steps for the free slots. One slot: claim and execute one due step
        (and the chain it leads to) here, returning the steps executed (0 when nothing
        was claimable). Threaded: hand up to as many due steps as there are free slots
        to them, returning how many were handed over (each slot's claim decides)."""
        if not self.slots.threaded:
            for step_id in due_step_ids():
                if self.identity.stopping.is_set():
                    return 0
                executed = self.slots.submit(step_id)
                if executed:
                    return executed
            return 0
        free = self.slots.free()
        if not free or self.identity.stopping.is_set():
            return 0
        taken = self._claim_batch(free)
        if taken == free:
            return taken
        # What the batch leaves (a workflow version not imported yet) goes to a slot's
        # own claim, which prepares the process first.
        free -= taken
        pending = set(self.slots.pending)
        for step_id in due_step_ids(limit=free + len(pending)):
            if step_id in pending:
                continue
            self.slots.submit(step_id)
            taken += 1
            free -= 1
            if not free:
                break
        return taken

    def _claim_batch(self, free: int) -> int:
        """Claim up to ``free`` due steps at once and hand each to a slot; returns how
        many (0 when no slot is free or the worker is stopping)."""
        if free < 1 or self.identity.stopping.is_set():
            return 0
        claimed = store().claim_due(
            self.worker_id, settings.AGENTOPS_LEASE_SECONDS, free, known=registry.loaded_keys()
        )
        for step in claimed:
            self.slots.submit(step.pk, step)
        return len(claimed)

    def maintain(self) -> None:
        """Periodic duties: the pooled connections the server ended are replaced, the
        worker heartbeat row, and the sweeper when this process holds the sweeper's
        maintenance lease."""
        now = time.monotonic()
        if now - self._last_beat >= 2:
            # First: the beat below must not be the one to draw a connection found dead.
            replaced = db_pool.replace_ended()
            if replaced:
                logger.warning(
                    "replaced %s pooled database connection(s) ended by the server", replaced
                )
            WorkerProcess.objects.filter(worker_id=self.worker_id).update(heartbeat_at=Now())
            self._last_beat = now
        if now - self._last_sweep >= settings.AGENTOPS_SWEEP_SECONDS:
            self._last_sweep = now
            ttl = settings.AGENTOPS_SWEEP_SECONDS * 3
            if sweeper.acquire_maintenance_lease("sweeper", self.worker_id, ttl):
                sweeper.sweep_once(self.worker_id)

    def _run_db(self) -> None:
        outage = RepeatedFailureLog(logger, "database polling")
        while not self.identity.stopping.is_set():
            if not self._wait_for_slot():
                continue
            close_old_connections()
            try:
                # A slot that ends while this poll looks may commit work for another run
                # (a child run, a thread's queued message) after the poll: a burst ends
                # only after a poll that began with every slot idle.
                was_busy = self.slots.busy()
                taken = self.handle_one()
                outage.succeeded()
                if self.slots.threaded:
                    self.maintain()
                    db_pool.release_connection()
                if taken:
                    continue
                if self.burst and not was_busy and not self.slots.busy():
                    break
                if not self.slots.threaded:
                    self.maintain()
            except Exception as exc:  # noqa: BLE001 - one step's trouble must never end the worker
                _handling_failed(outage, exc)
            self.identity.stopping.wait(settings.AGENTOPS_POLL_SECONDS)

    def _wait_for_slot(self) -> bool:
        """Wait up to one poll interval for a free slot; True when there is one."""
        return self.slots.wait_free(settings.AGENTOPS_POLL_SECONDS)

    def _run_rq(self) -> None:
        """Work RQ notifications. RQ gives up when Redis goes away under it (stopped,
        restarted, flushed mid-job, full); the engine does not: until Redis takes a write
        again this worker claims due steps straight from the database (the queue only
        notifies), then starts a fresh RQ worker. Startup recovery and the sweeper
        re-notify what the outage lost."""
        import django_rq

        queue = django_rq.get_queue(self.queue)
        worker_class = rq_worker_class(
            self.identity, fork=self.fork, slots=self.slots, claim_batch=self._claim_batch
        )
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

    def _work_from_db_until(self, redis_refusal, delay: float) -> float:
        """Database polling until ``redis_refusal()`` is ``None`` (Redis takes writes),
        the worker is stopping, or (burst) nothing is due. ``redis_refusal`` is asked
        after ``delay`` seconds, then at the intervals ``_next_probe_delay`` gives;
        returns the next interval, so an RQ round that fails at once waits longer
        before the next."""
        next_check = time.monotonic() + delay
        outage = RepeatedFailureLog(logger, "database polling")
        while not self.identity.stopping.is_set():
            if not self._wait_for_slot():
                continue
            close_old_connections()
            was_busy = self.slots.busy()
            try:
                taken = self.handle_one()
                db_pool.release_connection()
                outage.succeeded()
                if taken:
                    continue
            except Exception as exc:  # noqa: BLE001 - one step's trouble must never end the worker
                _handling_failed(outage, exc)
            # As in ``_run_db``: only a poll that began with every slot idle ends a burst.
            if self.burst and not was_busy and not self.slots.busy():
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
                db_pool.release_connection()
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
