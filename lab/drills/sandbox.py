"""A scratch deployment for drills, the soak and the benchmark.

``Sandbox`` clones a migrated template database on the configured PostgreSQL server
(``CREATE DATABASE ... TEMPLATE``: a fraction of a second instead of a migrate), uses
Redis database ``AGENTOPS_SCRATCH_REDIS_DB`` of the configured Redis server, gives the
simulated outside world its own directory, and starts real ``manage.py worker``
processes against all of that. While active, this process's own Django connection,
device directory and queue point at the sandbox too, so engine functions (``start_run``,
``run_status``) can be called directly. Everything is dropped on exit.

``PgCluster`` is a PostgreSQL server of our own (``initdb`` from the server binaries
``find_pg_server_bin`` finds) for drills that stop and start the database.
"""

import contextlib
import glob
import hashlib
import os
import pwd
import secrets
import shutil
import signal
import socket
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

MANAGE_PY = Path(settings.BASE_DIR) / "manage.py"
MIGRATION_DIRS = [Path(settings.BASE_DIR) / app / "migrations" for app in ("runs", "approvals")]


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def _migrations_hash() -> str:
    digest = hashlib.sha256()
    for directory in MIGRATION_DIRS:
        for path in sorted(directory.glob("*.py")):
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_template(server: dict) -> str:
    """Name of a migrated template database on ``server``, created (migrate in a
    subprocess, then renamed into place so a half-migrated one is never used) if missing."""
    name = f"agentops_scratch_tpl_{_migrations_hash()}"
    with admin_connect(server) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return name
        building = f"{name}_{secrets.token_hex(3)}"
        conn.execute(f'CREATE DATABASE "{building}"')
    env = {**os.environ, "DATABASE_URL": db_url(server, building)}
    proc = subprocess.run(
        [sys.executable, str(MANAGE_PY), "migrate", "--noinput", "-v", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    with admin_connect(server) as conn:
        if proc.returncode != 0:
            conn.execute(f'DROP DATABASE IF EXISTS "{building}"')
            raise SandboxError(f"migrate of the scratch template failed:\n{proc.stderr[-2000:]}")
        try:
            conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        except Exception:  # noqa: BLE001 - a concurrent builder won the race; use theirs
            conn.execute(f'DROP DATABASE IF EXISTS "{building}"')
    return name


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
        template = ensure_template(self.server)
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


#: Server binaries a drill's own PostgreSQL needs.
PG_SERVER_TOOLS = ("pg_ctl", "initdb", "postgres")


def find_pg_server_bin() -> Path | None:
    """The directory holding ``pg_ctl``, ``initdb`` and ``postgres``, found the way
    ``scripts/with_services.py`` finds it: ``AGENTOPS_PG_BIN``, then ``pg_ctl`` on PATH
    (its symlink's target directory first: Debian's PATH links lack ``initdb``), then
    the newest ``/usr/lib/postgresql/*/bin``; ``None`` if none has all three."""
    candidates = []
    if os.environ.get("AGENTOPS_PG_BIN"):
        candidates.append(Path(os.environ["AGENTOPS_PG_BIN"]))
    found = shutil.which("pg_ctl")
    if found:
        candidates += [Path(os.path.realpath(found)).parent, Path(found).parent]
    versions = [Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")]
    candidates += sorted(
        versions,
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for cand in candidates:
        if all(os.access(cand / tool, os.X_OK) for tool in PG_SERVER_TOOLS):
            return cand
    return None


def _run_as_user() -> str:
    """As root, the unprivileged OS user the drill's PostgreSQL runs as (it refuses
    root): ``AGENTOPS_PG_RUN_AS``, else ``agentops`` (the user ``scripts/with_services.py``
    creates), else ``postgres`` (Debian's package creates it); ``""`` if none exists."""
    for name in (os.environ.get("AGENTOPS_PG_RUN_AS"), "agentops", "postgres"):
        if not name:
            continue
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    return ""


class PgCluster:
    """A PostgreSQL server of our own in a temp dir, started and stopped with ``pg_ctl``.

    Finds the server binaries with ``find_pg_server_bin``; when we are root the server
    runs as ``_run_as_user()`` (PostgreSQL refuses root). Raises ``PgUnavailable`` (the
    drill is skipped with that reason) when either is missing. ``server`` gives the
    connection parameters for ``Sandbox(server=...)``. ``listen``: the addresses it
    listens on (loopback by default); ``conf``: more ``postgresql.conf`` settings;
    ``clients``: more client addresses it trusts (besides loopback's 127.0.0.1).
    """

    def __init__(
        self,
        *,
        listen: tuple[str, ...] = ("127.0.0.1",),
        conf: dict | None = None,
        clients: tuple[str, ...] = (),
    ):
        bin_dir = find_pg_server_bin()
        if bin_dir is None:
            raise PgUnavailable(
                "PostgreSQL server binaries (pg_ctl, initdb, postgres) not found on PATH, "
                "in AGENTOPS_PG_BIN or under /usr/lib/postgresql"
            )
        self.bin = bin_dir
        self.run_as = _run_as_user() if os.geteuid() == 0 else ""
        if os.geteuid() == 0 and not self.run_as:
            raise PgUnavailable(
                "running as root: set AGENTOPS_PG_RUN_AS to an unprivileged user for "
                "PostgreSQL (it refuses to run as root)"
            )
        self.root = Path(tempfile.mkdtemp(prefix="agentops-pgdrill-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self.listen = listen
        self.conf = dict(conf or {})
        self.clients = clients
        self.user = self.run_as or os.environ.get("USER") or "postgres"
        self.server = {
            "host": "127.0.0.1",
            "port": str(self.port),
            "user": self.user,
            "password": "",
        }

    def _pg(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        argv = [str(self.bin / args[0]), *args[1:]]
        if self.run_as:
            argv = ["runuser", "-u", self.run_as, "--", *argv]
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd=self.root,
        )

    def init(self) -> "PgCluster":
        if self.run_as:
            shutil.chown(self.root, self.run_as, self.run_as)
        proc = self._pg(
            "initdb",
            "-D",
            str(self.data),
            "--auth=trust",
            f"--username={self.user}",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        if proc.returncode:
            raise SandboxError(f"initdb failed: {proc.stderr[-1000:]}")
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as fh:
            fh.write(
                f"\nlisten_addresses = '{', '.join(self.listen)}'\nport = {self.port}\n"
                "unix_socket_directories = ''\nmax_connections = 100\nfsync = on\n"
            )
            fh.writelines(f"{name} = '{value}'\n" for name, value in self.conf.items())
        with open(self.data / "pg_hba.conf", "a", encoding="utf-8") as fh:
            fh.writelines(f"host all all {address}/32 trust\n" for address in self.clients)
        self.start()
        return self

    def start(self) -> None:
        proc = self._pg(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start"
        )
        if proc.returncode:
            raise SandboxError(f"pg_ctl start failed: {proc.stderr[-1000:]}")

    def stop(self, mode: str = "fast") -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
