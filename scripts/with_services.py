#!/usr/bin/env python3
"""Run a command beside a throwaway PostgreSQL and Redis, then tear both down.

Usage::

    python scripts/with_services.py [--keep-data] [--no-fsync] -- CMD ARGS...

Starts PostgreSQL (fresh ``initdb`` in a temp dir, trust auth, 127.0.0.1 on a free port)
and ``redis-server`` (127.0.0.1, free port, no persistence), waits until both answer,
creates the database ``agentops``, runs CMD with these variables added to its
environment, stops both services, removes the temp dir and exits with CMD's exit code:

- ``DATABASE_URL``          postgres://USER@127.0.0.1:PORT/agentops
- ``REDIS_URL``             redis://127.0.0.1:PORT/0
- ``AGENTOPS_PG_ADMIN_URL`` postgres://USER@127.0.0.1:PORT/postgres (to create databases)
- ``AGENTOPS_PG_DATA``      the data directory (for ``pg_ctl -D``)
- ``AGENTOPS_PG_BIN``       the directory holding pg_ctl, initdb, postgres, ...
- ``AGENTOPS_PG_RUN_AS``    the OS user PostgreSQL runs as when we are root, else empty
                            (run ``runuser -u "$AGENTOPS_PG_RUN_AS" -- pg_ctl ...``)
- ``AGENTOPS_PG_LOG``       PostgreSQL's log file; pass it to ``pg_ctl start -l`` when a
                            drill restarts the server (without ``-l`` the server holds
                            the caller's stdout/stderr, so a captured pg_ctl never ends)
- ``AGENTOPS_PG_PORT``      PostgreSQL's port (also in its config, so a restart keeps it)
- ``AGENTOPS_REDIS_BIN``    path of redis-server
- ``AGENTOPS_REDIS_PORT``   Redis's port
- ``AGENTOPS_REQUIRE_SERVICES`` ``1``: the services are up, so a test that would skip for
                            want of them (or for any other reason) fails instead

A drill may stop and restart either service; at the end PostgreSQL is stopped by its
data directory (whoever started it) and Redis by the PID this script started (a Redis a
drill restarted itself is the drill's to stop).

If the PostgreSQL binaries or redis-server are missing this fails with exit code 2 and
names ``scripts/install_system_deps.sh`` (which ``make test`` runs first). A service that
fails to start is an error too (exit 2), with the tail of its log.

``--no-fsync`` runs PostgreSQL with ``fsync = off`` and ``full_page_writes = off``: for
the test suite, whose data is thrown away (commits still wait for the WAL write, so
data survives a crash or kill of PostgreSQL itself, only not one of the machine). The
default keeps them on, as the documented benchmark figures were measured.

Exit codes: CMD's own; 128+N if CMD died of signal N; 127 if CMD was not found;
2 for errors of this script. Standard library only (it runs before the venv may exist):
the PostgreSQL server is ``lab.pg_bootstrap.PgServer``, the one bootstrapper the tests
and the drills use too, a plain module importable before Django is configured.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's directory is first on sys.path; the repository root holds
# the bootstrapper.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.pg_bootstrap import (  # noqa: E402 - after the path above
    START_ATTEMPTS,
    PgServer,
    ServiceError,
    find_pg_bin,
    free_port,
    parent_death_signal,
    tail,
)

PROG = "with_services"
DB_NAME = "agentops"
EXPORTED = (
    "DATABASE_URL",
    "REDIS_URL",
    "AGENTOPS_PG_ADMIN_URL",
    "AGENTOPS_PG_DATA",
    "AGENTOPS_PG_BIN",
    "AGENTOPS_PG_RUN_AS",
    "AGENTOPS_PG_LOG",
    "AGENTOPS_PG_PORT",
    "AGENTOPS_REDIS_BIN",
    "AGENTOPS_REDIS_PORT",
    "AGENTOPS_REQUIRE_SERVICES",
)


class Interrupted(Exception):
    """A terminating signal arrived while the services were being started (raised
    between start-up steps, never inside one: killing initdb mid-way would orphan its
    bootstrap postgres)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def log(msg: str) -> None:
    """Print one diagnostic line to stderr (stdout belongs to CMD)."""
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def redis_ping(port: int, timeout: float = 1.0) -> bool:
    """Return True if a Redis on 127.0.0.1:``port`` answers PING with PONG."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def spawn_redis(
    redis_bin: str,
    port: int,
    directory: Path,
    log_path: Path,
    *,
    conf: Path | None = None,
    die_with_parent: bool = True,
) -> subprocess.Popen:
    """Start ``redis-server`` on 127.0.0.1:``port`` in the foreground and return it at once.

    ``directory`` is its working directory (``--dir``); its output is appended to
    ``log_path``. Without ``conf`` it runs with no persistence (no RDB snapshots, no
    AOF); with it, that redis.conf decides (port, bind address and directory still come
    from here). It leads its own session, so a terminal's Ctrl-C does not kill it before
    its owner cleans up; ``die_with_parent`` also has it SIGTERMed when the calling
    thread's process dies (Linux; leave it off when the caller may be a short-lived
    thread). Raises ``OSError`` if the binary cannot be run. Wait with ``wait_redis``.
    """
    argv = [redis_bin, *([str(conf)] if conf else [])]
    argv += ["--port", str(port), "--bind", "127.0.0.1"]
    argv += [] if conf else ["--save", "", "--appendonly", "no"]
    argv += ["--daemonize", "no", "--dir", str(directory), "--logfile", ""]
    with open(log_path, "ab") as logf:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=parent_death_signal(signal.SIGTERM) if die_with_parent else None,
        )


def wait_redis(
    proc: subprocess.Popen,
    port: int,
    log_path: Path,
    timeout: float,
    check_interrupt: Callable[[], None] = lambda: None,
) -> bool:
    """Wait until the Redis ``proc`` (from ``spawn_redis``) answers PING on ``port``.

    Returns True once it answers, False if it exited first (its exit code is then in
    ``proc.returncode``; its log says why, e.g. "Address already in use"). Raises
    ``ServiceError`` with the tail of ``log_path`` if it neither answers nor exits
    within ``timeout`` seconds (the process is left running: stop it with
    ``stop_process``). ``check_interrupt()`` is called between polls and may raise.
    """
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if redis_ping(port):
            return True
        if time.monotonic() > deadline:
            raise ServiceError(
                f"redis-server on port {port} did not answer PING in "
                f"{timeout:.0f}s\n--- {log_path} ---\n{tail(log_path)}"
            )
        check_interrupt()
        time.sleep(0.02)
    return False


def stop_process(proc: subprocess.Popen, timeout: float) -> None:
    """Stop a child we started: SIGTERM, then SIGKILL if it is still running after
    ``timeout`` seconds; reaps it either way. A child that already exited is only reaped.
    """
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Services:
    """A throwaway PostgreSQL + Redis pair living in one temp dir.

    ``start(should_stop)`` raises ``ServiceError``, or ``Interrupted`` when
    ``should_stop()`` returns a signal number between steps; ``stop()`` is safe to call
    in any partial state and more than once. ``redis_conf``: a redis.conf to start Redis
    with (port, bind address and directory still come from here) instead of the
    throwaway settings (no persistence). ``fsync=False``: PostgreSQL skips fsync and full
    page writes (``--no-fsync`` in the module docstring).
    """

    def __init__(
        self,
        pg_bin: Path,
        redis_bin: str,
        keep_data: bool,
        redis_conf: Path | None = None,
        *,
        fsync: bool = True,
    ) -> None:
        self.pg_bin = pg_bin
        self.redis_bin = redis_bin
        self.keep_data = keep_data
        self.redis_conf = redis_conf
        self.fsync = fsync
        self.tmp: Path | None = None
        self.pg: PgServer | None = None
        self.redis_port = 0
        self.redis_proc: subprocess.Popen | None = None
        self.timings: dict[str, float] = {}
        self._should_stop: Callable[[], int | None] = lambda: None

    @property
    def pg_port(self) -> int:
        return self.pg.port if self.pg else 0

    @property
    def redis_log(self) -> Path:
        assert self.tmp is not None
        return self.tmp / "redis.log"

    def _check_interrupt(self) -> None:
        signum = self._should_stop()
        if signum is not None:
            raise Interrupted(signum)

    def env(self) -> dict[str, str]:
        """Return the variables to export to CMD (see the module docstring)."""
        assert self.pg is not None
        return {
            "DATABASE_URL": self.pg.url(DB_NAME),
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "AGENTOPS_PG_ADMIN_URL": self.pg.url("postgres"),
            "AGENTOPS_PG_DATA": str(self.pg.data),
            "AGENTOPS_PG_BIN": str(self.pg_bin),
            "AGENTOPS_PG_RUN_AS": self.pg.run_as.pw_name if self.pg.run_as else "",
            "AGENTOPS_PG_LOG": str(self.pg.log),
            "AGENTOPS_PG_PORT": str(self.pg.port),
            "AGENTOPS_REDIS_BIN": self.redis_bin,
            "AGENTOPS_REDIS_PORT": str(self.redis_port),
            "AGENTOPS_REQUIRE_SERVICES": "1",
        }

    # start -------------------------------------------------------------------------
    def start(self, should_stop: Callable[[], int | None] = lambda: None) -> None:
        """Create the temp dir, start both services and create the database.

        ``should_stop() -> int | None`` is polled between steps; a signal number aborts
        the start with ``Interrupted``. Raises ``ServiceError`` (with log tails) when
        something fails. Call ``stop()`` afterwards in every case.
        """
        self._should_stop = should_stop
        self.tmp = Path(tempfile.mkdtemp(prefix="agentops-services-"))
        self.pg = PgServer(self.pg_bin, self.tmp, fsync=self.fsync)
        self._check_interrupt()
        t0 = time.monotonic()
        self.pg.init()
        # The postmaster is our own child rather than daemonized by `pg_ctl start` so
        # that it dies with us even if we are SIGKILLed; `pg_ctl stop` still works on it.
        self.pg.start(as_child=True, check_interrupt=self._check_interrupt)
        self.pg.create_database(DB_NAME)
        t1 = time.monotonic()
        self._check_interrupt()
        self._start_redis()
        t2 = time.monotonic()
        self._check_interrupt()
        self.timings = {"postgres": t1 - t0, "redis": t2 - t1}

    def _start_redis(self, timeout: float = 20.0) -> None:
        assert self.tmp is not None
        redis_dir = self.tmp / "redis"
        redis_dir.mkdir(exist_ok=True)
        for attempt in range(1, START_ATTEMPTS + 1):
            self._check_interrupt()
            self.redis_port = free_port()
            log_offset = self.redis_log.stat().st_size if self.redis_log.exists() else 0
            self.redis_proc = spawn_redis(
                self.redis_bin, self.redis_port, redis_dir, self.redis_log, conf=self.redis_conf
            )
            if wait_redis(
                self.redis_proc, self.redis_port, self.redis_log, timeout, self._check_interrupt
            ):
                return
            rc = self.redis_proc.returncode
            self.redis_proc = None
            new_log = self.redis_log.read_text(errors="replace")[log_offset:]
            if "Address already in use" not in new_log or attempt == START_ATTEMPTS:
                raise ServiceError(
                    f"redis-server exited with {rc} during start\n--- {self.redis_log} ---\n"
                    f"{tail(self.redis_log)}"
                )

    # stop --------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop both services (whatever state they are in) and remove the temp dir."""
        if self.tmp is None:
            return
        self._stop_postgres()
        self._stop_redis()
        if self.keep_data:
            log(f"kept data in {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
            if self.tmp.exists():  # a process was still writing into it: once more
                time.sleep(0.5)
                shutil.rmtree(self.tmp, ignore_errors=True)
            if self.tmp.exists():
                log(f"could not remove {self.tmp}")
        self.tmp = None

    def _stop_postgres(self) -> None:
        """Stop PostgreSQL by its data directory, whether we started it or a drill
        restarted it."""
        if self.pg is not None:
            self.pg.stop("fast", say=log)

    def _stop_redis(self, timeout: float = 10.0) -> None:
        proc, self.redis_proc = self.redis_proc, None
        if proc is not None:
            stop_process(proc, timeout)


class Runner:
    """Runs CMD and turns terminating signals into a clean shutdown.

    SIGINT/SIGTERM/SIGHUP are only recorded while the services start (``pending()``
    reports them between steps). While CMD runs they are forwarded to it (except a
    terminal's Ctrl-C, which the terminal already sent to CMD's process group), and we
    wait for it to exit before stopping the services.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.received: int | None = None
        self.sigint_count = 0

    def install(self) -> None:
        for sig in self.SIGNALS:
            signal.signal(sig, self._on_signal)

    def pending(self) -> int | None:
        """The first terminating signal received so far, or None."""
        return self.received

    def _on_signal(self, signum: int, _frame) -> None:
        if self.received is None:
            self.received = signum
        child = self.child
        if child is None or child.poll() is not None:
            return  # starting up or cleaning up: the main flow checks `received`
        if signum == signal.SIGINT:
            self.sigint_count += 1
            if self.sigint_count == 1 and _terminal_sent_to_our_group():
                return
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    def run(self, cmd: list[str], env: dict[str, str]) -> int:
        """Run ``cmd`` with ``env`` in the foreground; return a shell-style exit code."""
        if self.received is not None:
            return 128 + self.received
        try:
            self.child = subprocess.Popen(cmd, env=env)
        except FileNotFoundError:
            log(f"command not found: {cmd[0]}")
            return 127
        except PermissionError:
            log(f"command not executable: {cmd[0]}")
            return 126
        if self.received is not None:  # arrived between the check above and Popen
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(self.received)
        rc = self.child.wait()
        return 128 - rc if rc < 0 else rc


def _terminal_sent_to_our_group() -> bool:
    """True if our process group is the terminal's foreground group, i.e. a Ctrl-C there
    already reached CMD (which shares our group) and forwarding would deliver it twice."""
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="with_services.py",
        description="Run CMD beside a throwaway PostgreSQL and Redis.",
        usage="%(prog)s [--keep-data] [--no-fsync] -- CMD ARGS...",
    )
    parser.add_argument(
        "--keep-data",
        action="store_true",
        help="keep the temp dir (data, logs) after stopping the services",
    )
    parser.add_argument(
        "--no-fsync",
        action="store_true",
        help="PostgreSQL without fsync and full page writes (throwaway data: the test suite)",
    )
    if "--" in argv:
        split = argv.index("--")
        own, cmd = argv[:split], argv[split + 1 :]
    else:
        own, cmd = argv, []
    args = parser.parse_args(own)
    if not cmd:
        parser.error("missing command after '--'")
    args.cmd = cmd
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (see the module docstring)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    runner = Runner()
    runner.install()

    pg_bin, reason = find_pg_bin()
    redis_bin = shutil.which("redis-server")
    if pg_bin is not None and redis_bin is None:
        reason = "redis-server not found on PATH"
    if pg_bin is None or redis_bin is None:
        log(f"ERROR: {reason}; run scripts/install_system_deps.sh (as root) first")
        return 2

    services = Services(pg_bin, redis_bin, args.keep_data, fsync=not args.no_fsync)
    try:
        try:
            services.start(should_stop=runner.pending)
        except ServiceError as exc:
            log(f"ERROR starting services: {exc}")
            return 2
        except (OSError, subprocess.SubprocessError) as exc:  # e.g. a hung initdb
            log(f"ERROR starting services: {type(exc).__name__}: {exc}")
            return 2
        log(
            f"PostgreSQL 127.0.0.1:{services.pg_port} ({services.timings['postgres']:.1f}s), "
            f"Redis 127.0.0.1:{services.redis_port} ({services.timings['redis']:.1f}s), "
            f"dir {services.tmp}"
        )
        env.update(services.env())
        return runner.run(args.cmd, env)
    except Interrupted as exc:
        log(f"interrupted by {exc} while starting; stopping services")
        return 128 + exc.signum
    finally:
        services.stop()


if __name__ == "__main__":
    sys.exit(main())
