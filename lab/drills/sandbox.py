"""A scratch deployment for drills, the soak and the benchmark.

``Sandbox`` clones a migrated template database on the configured PostgreSQL server
(``CREATE DATABASE ... TEMPLATE``: a fraction of a second instead of a migrate), uses
Redis database ``AGENTOPS_SCRATCH_REDIS_DB`` of the configured Redis server, gives the
simulated outside world its own directory, and starts real ``manage.py worker``
processes against all of that. While active, this process's own Django connection,
device directory and queue point at the sandbox too, so engine functions (``start_run``,
``run_status``) can be called directly. Everything is dropped on exit.

``PgCluster`` is a PostgreSQL server of our own (``lab.pg_bootstrap.PgServer``) for
drills that stop and start the database.
"""

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from django.conf import settings
from django.db import connections

from agentops.links import bounded_redis_url
from lab.drills.base import DrillSkipped
from lab.pg_bootstrap import (
    PgServer,
    ServiceError,
    ensure_template,
    find_pg_bin,
    migrations_hash,
)

MANAGE_PY = Path(settings.BASE_DIR) / "manage.py"


class SandboxError(Exception):
    """The sandbox cannot be set up (no PostgreSQL or Redis configured, initdb failed...)."""


class PgUnavailable(DrillSkipped, SandboxError):
    """This machine cannot run a PostgreSQL server of our own; the message says why."""


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.1):
    """Poll ``predicate`` until it returns a truthy value (returned) or ``timeout``
    seconds pass (returns the last falsy value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (``T`` = stopped), or ``""`` if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


#: How to get PostgreSQL and Redis for a command that needs them (said in its error).
HOW_TO_GET_SERVICES = (
    "e.g. start throwaway ones for one command with "
    "`.venv/bin/python scripts/with_services.py -- .venv/bin/python manage.py drill --all` "
    "(needs the PostgreSQL 15 server binaries and redis-server; see docs/drills-and-bench.md)"
)


def server_from_settings() -> dict:
    """Connection parameters of the configured PostgreSQL server; ``SandboxError`` if the
    configured database is not PostgreSQL."""
    db = settings.DATABASES["default"]
    if "postgresql" not in db["ENGINE"]:
        raise SandboxError(
            "drills, soak and bench need PostgreSQL and Redis (DATABASE_URL, REDIS_URL); "
            + HOW_TO_GET_SERVICES
        )
    return {
        "host": db.get("HOST") or "127.0.0.1",
        "port": str(db.get("PORT") or 5432),
        "user": db.get("USER") or "",
        "password": db.get("PASSWORD") or "",
    }


def db_url(server: dict, name: str) -> str:
    auth = quote(server["user"])
    if server["password"]:
        auth += ":" + quote(server["password"])
    return f"postgres://{auth}@{server['host']}:{server['port']}/{name}"


def admin_connect(server: dict):
    import psycopg

    return psycopg.connect(
        dbname="postgres",
        host=server["host"],
        port=server["port"],
        user=server["user"],
        password=server["password"] or None,
        autocommit=True,
        connect_timeout=10,
    )


def scratch_template(server: dict) -> str:
    """Name of the migrated template database of the scratch databases on ``server``
    (``lab.pg_bootstrap.ensure_template``: built if missing, kept for the next drill).
    Raises ``SandboxError`` if its migrate fails."""
    name = f"agentops_scratch_tpl_{migrations_hash()[:12]}"
    try:
        return ensure_template(db_url(server, "postgres"), name, os.environ)
    except ServiceError as exc:
        raise SandboxError(str(exc)) from None


def scratch_redis_url() -> str:
    """The configured Redis server with database ``AGENTOPS_SCRATCH_REDIS_DB``."""
    if not settings.REDIS_URL:
        raise SandboxError("drills, soak and bench need Redis (REDIS_URL); " + HOW_TO_GET_SERVICES)
    parts = urlsplit(settings.REDIS_URL)
    return urlunsplit(parts._replace(path=f"/{settings.AGENTOPS_SCRATCH_REDIS_DB}"))


class SandboxProcess(subprocess.Popen):
    """A process started by a sandbox; ``log_path`` is the file its output goes to."""

    log_path: Path


class Sandbox:
    """A scratch database + Redis db + device dir + worker processes (module docstring).

    ``env``: extra environment for every worker (e.g. ``{"AGENTOPS_LEASE_SECONDS": "3"}``);
    ``server``: connection parameters of another PostgreSQL server (``PgCluster.server``);
    ``redis_url``: another Redis database (default: ``scratch_redis_url()``).
    Use as a context manager; ``workers`` lists the processes started.
    """

    def __init__(
        self,
        label: str,
        *,
        env: dict | None = None,
        server: dict | None = None,
        redis_url: str | None = None,
    ):
        self.label = label
        self.server = server or server_from_settings()
        self.redis_url = redis_url or scratch_redis_url()
        self.extra_env = {k: str(v) for k, v in (env or {}).items()}
        self.root = Path(tempfile.mkdtemp(prefix=f"agentops-{label}-"))
        self.db_name = f"agentops_scratch_{label}_{os.getpid()}_{secrets.token_hex(3)}"
        self.workers: list[SandboxProcess] = []
        self._saved: dict = {}

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> "Sandbox":
        template = scratch_template(self.server)
        with admin_connect(self.server) as conn:
            conn.execute(f'CREATE DATABASE "{self.db_name}" TEMPLATE "{template}"')
        self.redis().flushdb()
        self._activate()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Kill the workers, restore this process's settings, drop the scratch database."""
        self.kill_workers()
        self._deactivate()
        with contextlib.suppress(Exception):
            self.redis().flushdb()
        with contextlib.suppress(Exception), admin_connect(self.server) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def database_url(self) -> str:
        return db_url(self.server, self.db_name)

    def env(self, extra: dict | None = None) -> dict[str, str]:
        """The environment of a sandbox process."""
        env = dict(os.environ)
        env.update(
            {
                "DATABASE_URL": self.database_url,
                "REDIS_URL": self.redis_url,
                "AGENTOPS_VAR_DIR": str(self.root),
                "AGENTOPS_DEVICE_DIR": str(self.root / "devices"),
                "AGENTOPS_MEDIA_ROOT": str(self.root / "artifacts"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        env.update({k: str(v) for k, v in (extra or {}).items()})
        return env

    def _activate(self) -> None:
        conn = connections["default"]
        conn.close()
        rq = settings.RQ_QUEUES["default"]
        self._saved = {
            "db": dict(conn.settings_dict),
            "rq_url": rq["URL"],
            "redis": settings.REDIS_URL,
            "devices": settings.AGENTOPS_DEVICE_DIR,
            "media": settings.MEDIA_ROOT,
        }
        conn.settings_dict.update(
            {
                "NAME": self.db_name,
                "HOST": self.server["host"],
                "PORT": self.server["port"],
                "USER": self.server["user"],
                "PASSWORD": self.server["password"],
            }
        )
        rq["URL"] = bounded_redis_url(self.redis_url)
        settings.REDIS_URL = self.redis_url
        settings.AGENTOPS_DEVICE_DIR = self.root / "devices"
        settings.MEDIA_ROOT = self.root / "artifacts"

    def _deactivate(self) -> None:
        if not self._saved:
            return
        conn = connections["default"]
        with contextlib.suppress(Exception):
            conn.close()
        conn.settings_dict.clear()
        conn.settings_dict.update(self._saved["db"])
        settings.RQ_QUEUES["default"]["URL"] = self._saved["rq_url"]
        settings.REDIS_URL = self._saved["redis"]
        settings.AGENTOPS_DEVICE_DIR = self._saved["devices"]
        settings.MEDIA_ROOT = self._saved["media"]
        self._saved = {}

    # -- services -----------------------------------------------------------------------
    def redis(self):
        import redis

        return redis.Redis.from_url(self.redis_url, socket_timeout=10)

    def drop_redis_connections(self) -> int:
        """Flush the scratch Redis db and kill every other client connection: what a
        Redis restart without persistence does to its clients. Returns clients killed."""
        client = self.redis()
        client.flushdb()
        return int(client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"))

    # -- processes ----------------------------------------------------------------------
    def popen(
        self, argv: list[str], *, extra_env: dict | None = None, label: str = "proc"
    ) -> SandboxProcess:
        """Start ``argv`` in its own session with the sandbox environment; output goes to
        ``<root>/<label>-<n>.log`` (``proc.log_path``)."""
        log_path = self.root / f"{label}-{len(self.workers) + 1}.log"
        with open(log_path, "w", encoding="utf-8") as log:
            proc = SandboxProcess(
                argv,
                env=self.env(extra_env),
                cwd=settings.BASE_DIR,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc.log_path = log_path
        self.workers.append(proc)
        return proc

    def start_worker(
        self,
        *,
        mode: str = "rq",
        extra_env: dict | None = None,
        probe_file: Path | None = None,
        prefix: list[str] | None = None,
    ):
        """Start ``manage.py worker --mode MODE``; with ``probe_file`` the worker counts
        its queries and commits and writes them there at exit (``lab.drills.probe``);
        ``prefix`` runs it through another command that ends by exec-ing it (``ip netns
        exec NAME``: the pid stays the worker's). The worker skips Django's system
        checks: the command that starts it (drill, soak, bench) runs them at its own
        start, with the same code and settings, and they are half of a worker's start-up
        CPU."""
        if probe_file is not None:
            argv = [sys.executable, "-m", "lab.drills.probe", str(probe_file), "worker"]
        else:
            argv = [sys.executable, str(MANAGE_PY), "worker"]
        argv = [*(prefix or []), *argv, "--skip-checks", "--mode", mode]
        return self.popen(argv, extra_env=extra_env, label="worker")

    def start_sweeper(self):
        """Start the standalone ``manage.py sweeper`` loop (its log: ``sweeper-N.log``)."""
        return self.popen([sys.executable, str(MANAGE_PY), "sweeper"], label="sweeper")

    def live_workers(self) -> list[SandboxProcess]:
        return [p for p in self.workers if p.poll() is None]

    def dead_workers(self, tail: int = 40) -> list[str]:
        """One line per process of this sandbox that has exited: its log name, exit code
        (negative: killed by that signal) and the last ``tail`` lines of its log, so a
        drill check that finds a worker gone says why."""
        return [
            f"{Path(p.log_path).name} exit {p.returncode}: "
            + " | ".join(self.log(p).strip().splitlines()[-tail:])
            for p in self.workers
            if p.poll() is not None
        ]

    def signal(self, proc: subprocess.Popen, signum: int) -> None:
        """Send ``signum`` to a process this sandbox started, if it is still alive."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signum)

    def stop_workers(self, timeout: float = 30) -> None:
        """SIGTERM every live worker (graceful), SIGKILL those still alive after ``timeout``."""
        for proc in self.live_workers():
            self.signal(proc, signal.SIGCONT)
            self.signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        self.kill_workers()

    def kill_workers(self) -> None:
        """SIGKILL every process this sandbox started, with anything it started in turn
        (each leads its own session and process group), and reap it."""
        for proc in self.workers:
            if proc.poll() is None:
                # Only a live leader's group: once reaped, its pid may be someone else's.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                self.signal(proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def log(self, proc: SandboxProcess) -> str:
        return Path(proc.log_path).read_text(encoding="utf-8", errors="replace")


class PgCluster:
    """A PostgreSQL server of our own in a temp dir (``lab.pg_bootstrap.PgServer``),
    started and stopped with ``pg_ctl`` so a drill can take it down and bring it back on
    the same port.

    Raises ``PgUnavailable`` (the drill is skipped with that reason) when the server
    binaries are missing or, as root, no unprivileged user can run it. ``server`` gives
    the connection parameters for ``Sandbox(server=...)`` once ``init()`` has started
    it. ``listen``: the addresses it listens on (loopback by default); ``conf``: more
    ``postgresql.conf`` settings; ``clients``: more client addresses it trusts (besides
    loopback's 127.0.0.1).
    """

    def __init__(
        self,
        *,
        listen: tuple[str, ...] = ("127.0.0.1",),
        conf: dict | None = None,
        clients: tuple[str, ...] = (),
    ):
        bin_dir, missing = find_pg_bin()
        if bin_dir is None:
            raise PgUnavailable(missing)
        root = Path(tempfile.mkdtemp(prefix="agentops-pgdrill-"))
        try:
            self.pg = PgServer(
                bin_dir, root, listen=listen, clients=clients, conf=conf, max_connections=100
            )
        except ServiceError as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise PgUnavailable(str(exc)) from None

    @property
    def server(self) -> dict:
        return self.pg.server

    def init(self) -> "PgCluster":
        """Create the cluster and start it on a free port; ``SandboxError`` if it fails."""
        try:
            self.pg.init()
            self.pg.start()
        except ServiceError as exc:
            raise SandboxError(str(exc)) from None
        return self

    def start(self) -> None:
        """Start it again after ``stop()``, on the same port."""
        try:
            self.pg.restart()
        except ServiceError as exc:
            raise SandboxError(str(exc)) from None

    def stop(self, mode: str = "fast") -> None:
        self.pg.stop(mode)

    def destroy(self) -> None:
        self.pg.stop("immediate")
        shutil.rmtree(self.pg.root, ignore_errors=True)
