"""Helpers for black-box tests that run ``manage.py`` in subprocesses.

Each test gets a ``Deployment``: a fresh database (SQLite file or PostgreSQL database),
its own var/devices/artifacts dirs under the test's tmp dir, and an environment for
subprocesses. Migrations run once per test session into a template (keyed on
``lab.pg_bootstrap.migrations_hash``; PostgreSQL's built by ``lab.pg_bootstrap``'s
``ensure_template``) that each deployment copies or clones, because migrating per test
costs seconds.

PostgreSQL and Redis come from ``scripts/with_services.py`` (``make test``) through
``AGENTOPS_PG_ADMIN_URL``, ``DATABASE_URL`` and ``REDIS_URL``; without them, postgres
deployments skip (and fail under ``CI=true`` or ``AGENTOPS_REQUIRE_SERVICES=1``, which
``make test`` sets). Use the ``deployment_factory`` fixture from
``tests/support/fixtures.py`` rather than ``make_deployment`` directly, so that
databases and processes are cleaned up.

Under pytest-xdist every worker process has its own databases (pytest-django suffixes
the test database with the worker id; deployments and templates carry the PID) and its
own Redis database number (``isolate_xdist_worker``). A test that changes the Redis
*server* (FLUSHALL, CLIENT KILL, CONFIG SET, a restart) starts its own with
``RedisServer`` instead (the ``private_redis`` fixture); one that stops PostgreSQL runs
its own cluster (``lab.drills.sandbox.PgCluster``).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import re
import secrets
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from agentops.links import bounded_redis_url
from lab.pg_bootstrap import drop_database, ensure_template, migrations_hash, with_database
from scripts import with_services

REPO_ROOT = Path(__file__).resolve().parents[2]
MANAGE_PY = REPO_ROOT / "manage.py"

#: Backends for ``@pytest.mark.parametrize("backend", BACKENDS)``.
BACKENDS = ["sqlite", "postgres"]

SKIP_REASON = "PostgreSQL/Redis not started: run via `make test` (scripts/with_services.py)"
SERVICE_VARS = ("DATABASE_URL", "AGENTOPS_PG_ADMIN_URL", "REDIS_URL")
MIGRATE_TIMEOUT = 600  # seconds; a cold migrate on a loaded 2-core CI machine

_counter = itertools.count(1)


def is_ci() -> bool:
    """True under ``CI=true``."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def skips_forbidden() -> bool:
    """True when no test may skip: in CI, and under ``make test``
    (``AGENTOPS_REQUIRE_SERVICES=1`` from scripts/with_services.py)."""
    return is_ci() or os.environ.get("AGENTOPS_REQUIRE_SERVICES") == "1"


def require_services() -> None:
    """Skip the calling test unless PostgreSQL and Redis were started for this run.

    Needs ``DATABASE_URL``, ``AGENTOPS_PG_ADMIN_URL`` and ``REDIS_URL`` in the
    environment. Calls ``pytest.skip`` when they are missing, or ``pytest.fail`` when
    ``skips_forbidden()`` (CI and ``make test`` must never skip these tests).
    """
    missing = [name for name in SERVICE_VARS if not os.environ.get(name)]
    if not missing:
        return
    message = f"{SKIP_REASON}; missing {', '.join(missing)}"
    if skips_forbidden():
        pytest.fail(f"{message} (CI or make test: these tests may not skip)", pytrace=False)
    pytest.skip(message)


#: Redis database numbers (a server has 16, 0-15): outside xdist the app uses 0 and the
#: drills' scratch database (``AGENTOPS_SCRATCH_REDIS_DB``) is 15; worker gwN uses 1 + N
#: and its own scratch database 8 + N, so no two workers flush each other's queues.
MAX_XDIST_WORKERS = 7


def isolate_xdist_worker(worker_id: str | None, settings) -> None:
    """Give this pytest-xdist worker (``worker_id`` like ``"gw3"``; ``None`` outside
    xdist: nothing changes) its own Redis database number, its own scratch Redis database
    for drills, soak and bench, and its own default device and artifact directories, in
    ``settings`` and in ``os.environ`` (which deployments and worker subprocesses
    inherit). Its PostgreSQL test database is pytest-django's ``test_<name>_gwN``.
    Raises ``pytest.UsageError`` past ``MAX_XDIST_WORKERS``.
    """
    if not worker_id:
        return
    number = int(worker_id.removeprefix("gw"))
    if number >= MAX_XDIST_WORKERS:
        raise pytest.UsageError(f"at most {MAX_XDIST_WORKERS} xdist workers (-n)")
    if os.environ.get("REDIS_URL"):
        parts = urlsplit(os.environ["REDIS_URL"])
        url = urlunsplit(parts._replace(path=f"/{number + 1}"))
        os.environ["REDIS_URL"] = url
        settings.REDIS_URL = url
        settings.RQ_QUEUES["default"]["URL"] = bounded_redis_url(url)
    scratch = 1 + MAX_XDIST_WORKERS + number
    os.environ["AGENTOPS_SCRATCH_REDIS_DB"] = str(scratch)
    settings.AGENTOPS_SCRATCH_REDIS_DB = scratch
    root = Path(tempfile.mkdtemp(prefix=f"agentops-{worker_id}-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    for name, setting in (("devices", "AGENTOPS_DEVICE_DIR"), ("artifacts", "MEDIA_ROOT")):
        path = root / name
        path.mkdir()
        setattr(settings, setting, path)
    os.environ["AGENTOPS_DEVICE_DIR"] = str(root / "devices")
    os.environ["AGENTOPS_MEDIA_ROOT"] = str(root / "artifacts")


class RedisServer:
    """A redis-server of a test's own on a free loopback port (no persistence), for
    tests that flush, restart or reconfigure the whole server.

    ``start()`` waits until it answers PING (raises ``RuntimeError`` with its log after
    ``timeout`` seconds); ``stop()`` terminates it by its PID (safe twice); ``url(db)``
    is ``redis://127.0.0.1:PORT/db``. Needs ``AGENTOPS_REDIS_BIN`` (from ``make test``)
    or redis-server on PATH.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self, timeout: float = 30.0) -> RedisServer:
        """Start it (again, on the same port after a ``stop()``) and wait for PING."""
        binary = os.environ.get("AGENTOPS_REDIS_BIN") or shutil.which("redis-server")
        if not binary:
            raise RuntimeError("redis-server not found (run via make test)")
        if not self.port:
            self.port = with_services.free_port()
        # Not tied to the starting thread's life: a fixture may start it from any thread.
        self.proc = with_services.spawn_redis(
            binary, self.port, self.directory, self.log_path, die_with_parent=False
        )
        try:
            answered = with_services.wait_redis(self.proc, self.port, self.log_path, timeout)
        except with_services.ServiceError as exc:
            self.stop()
            raise RuntimeError(str(exc)) from None
        if not answered:
            code = self.proc.returncode
            self.stop()
            raise RuntimeError(
                f"redis-server exited with {code} during start\n--- {self.log_path} ---\n"
                f"{with_services.tail(self.log_path)}"
            )
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after ``timeout`` seconds)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            with_services.stop_process(proc, timeout)


def _base_env(root: Path) -> dict[str, str]:
    """Environment for a deployment rooted at ``root``; creates its var dirs.

    Starts from the test process's environment (PATH, the service variables a drill
    needs, developer knobs like AGENTOPS_LOG_LEVEL) without DATABASE_URL and REDIS_URL,
    which the caller sets per backend.
    """
    var = root / "var"
    dirs = {
        "AGENTOPS_VAR_DIR": var,
        "AGENTOPS_DEVICE_DIR": var / "devices",
        "AGENTOPS_MEDIA_ROOT": var / "artifacts",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    env.update({name: str(path) for name, path in dirs.items()})
    env["AGENTOPS_SQLITE_PATH"] = str(var / "agentops.sqlite3")
    env["DJANGO_SETTINGS_MODULE"] = "agentops.settings"
    env["PYTHONUNBUFFERED"] = "1"  # logs of killed processes must be on disk already
    # Most tests assert what one step at a time leaves (orderings, counts at a kill);
    # the tests of slots pass --concurrency, or set this in their extra_env.
    env.setdefault("AGENTOPS_WORKER_CONCURRENCY", "1")
    return env


def _apply_extra(env: dict[str, str], extra_env: Mapping[str, object] | None) -> None:
    """Overlay ``extra_env`` on ``env``: values become strings, ``None`` removes a name."""
    for name, value in (extra_env or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)


def _describe(cmd: list[str], stdout: str | bytes | None, stderr: str | bytes | None) -> str:
    def text(value: str | bytes | None) -> str:
        if value is None:
            return ""
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        return value[-4000:]  # the end holds the traceback

    return (
        f"command: {' '.join(cmd[1:])}\n--- stdout (tail) ---\n{text(stdout)}"
        f"\n--- stderr (tail) ---\n{text(stderr)}"
    )


class ManageError(subprocess.CalledProcessError):
    """``manage.py`` exited non-zero under ``check=True``; ``str()`` shows its output."""

    def __str__(self) -> str:
        return f"exit status {self.returncode}\n{_describe(self.cmd, self.stdout, self.stderr)}"


class ManageTimeout(subprocess.TimeoutExpired):
    """``manage.py`` ran past its timeout (and was killed); ``str()`` shows its output."""

    def __str__(self) -> str:
        return f"timed out after {self.timeout}s\n{_describe(self.cmd, self.stdout, self.stderr)}"


_CHECKED_COMMANDS: dict[str, bool] = {}


def _runs_checks(name: str) -> bool:
    """True if the management command ``name`` runs Django's system checks before it
    starts (``requires_system_checks``), so that it accepts ``--skip-checks``."""
    if name not in _CHECKED_COMMANDS:
        from django.core.management import get_commands, load_command_class

        app = get_commands().get(name)
        command = load_command_class(app, name) if app else None
        _CHECKED_COMMANDS[name] = bool(command and command.requires_system_checks)
    return _CHECKED_COMMANDS[name]


def manage_argv(*args: object) -> list[str]:
    """The argv that runs ``manage.py *args`` with this test's Python, with Django's
    ``--skip-checks`` after the command's name where the command runs the system checks.

    The checks depend only on the code and the settings every deployment of the session
    shares (the project's own check, the durability one, runs only when asked for the
    database tag), and they are more than half of a short command's start-up: about 0.6 s
    of CPU each, mostly importing the URLconf and the API. They still run where they are
    the subject: the session's template ``migrate`` and ``manage.py check``.
    """
    argv = [sys.executable, str(MANAGE_PY), *map(str, args)]
    if args and _runs_checks(str(args[0])):
        argv.insert(3, "--skip-checks")
    return argv


def _run_manage(
    env: Mapping[str, str], args: tuple, *, timeout: float, input: str | None = None
) -> subprocess.CompletedProcess:
    cmd = manage_argv(*args)
    try:
        return subprocess.run(
            cmd,
            env=dict(env),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            input=input,
            # No input means no stdin at all: a command that prompts fails, never hangs.
            stdin=subprocess.DEVNULL if input is None else None,
        )
    except subprocess.TimeoutExpired as exc:
        raise ManageTimeout(cmd, exc.timeout, exc.output, exc.stderr) from None


def shell_output(code: str, env: Mapping[str, str]) -> str:
    """The last line ``manage.py shell -c code`` prints, run in a process of its own with
    exactly ``env`` as its environment, outside any deployment: for what the settings make
    of the environment at start-up. Raises ``ManageError`` on a non-zero exit and
    ``ManageTimeout`` after 120 seconds."""
    proc = _run_manage(env, ("shell", "-c", code), timeout=120)
    if proc.returncode != 0:
        raise ManageError(proc.returncode, proc.args, proc.stdout, proc.stderr)
    return proc.stdout.strip().splitlines()[-1]


def _migrate(env: Mapping[str, str]) -> None:
    proc = _run_manage(env, ("migrate", "--noinput"), timeout=MIGRATE_TIMEOUT)
    if proc.returncode != 0:
        raise ManageError(proc.returncode, proc.args, proc.stdout, proc.stderr)


def session_key() -> str:
    """A key shared by every process of this pytest session: the controller's PID under
    pytest-xdist (a worker is its direct child), else this process's PID."""
    return str(os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid())


def is_session_owner() -> bool:
    """True in the process that outlives the others of the session: the xdist controller,
    or the only process without xdist."""
    return not os.environ.get("PYTEST_XDIST_WORKER")


class Templates:
    """Migrated template databases, built lazily once per pytest session and migrations
    hash, and shared by all of the session's xdist workers (the first to need one builds
    it under a lock; the others wait and reuse it).

    SQLite: a migrated file in ``<tmp>/agentops-templates-<session>``, copied per
    deployment. PostgreSQL: a database ``agentops_tpl_<session>_<hash>`` cloned with
    ``CREATE DATABASE ... TEMPLATE``, also the template of pytest-django's test database
    (``use_for_test_database``). ``cleanup()`` drops and removes them in the session's
    owner process only (``is_session_owner``), after every worker is done.
    """

    def __init__(self) -> None:
        self._sqlite: dict[str, Path] = {}
        self._postgres: dict[tuple[str, str], str] = {}  # (admin url, hash) -> db name

    @staticmethod
    def _workdir() -> Path:
        path = Path(tempfile.gettempdir()) / f"agentops-templates-{session_key()}"
        path.mkdir(exist_ok=True)
        return path

    def sqlite(self) -> Path:
        """Return the path of a migrated SQLite file to copy (never to open for writing)."""
        import fcntl

        key = migrations_hash()
        if key not in self._sqlite:
            root = self._workdir() / f"sqlite-{key[:12]}"
            path = root / "var" / "agentops.sqlite3"
            done = root / "migrated"
            with open(self._workdir() / f"sqlite-{key[:12]}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not done.exists():
                    shutil.rmtree(root, ignore_errors=True)  # a half-built one
                    env = _base_env(root)
                    _migrate(env)
                    # The file is in WAL mode: fold the WAL into the main file so that
                    # copying the main file alone copies the whole database.
                    with contextlib.closing(sqlite3.connect(path)) as conn:
                        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    done.touch()
            self._sqlite[key] = path
        return self._sqlite[key]

    def postgres(self, admin_url: str) -> str:
        """Return the name of a migrated template database on the server of ``admin_url``."""
        key = migrations_hash()
        if (admin_url, key) not in self._postgres:
            name = f"agentops_tpl_{session_key()}_{key[:12]}"
            env = _base_env(self._workdir() / f"postgres-{key[:12]}")
            self._postgres[(admin_url, key)] = ensure_template(admin_url, name, env)
        return self._postgres[(admin_url, key)]

    def use_for_test_database(self, settings_dict: dict) -> None:
        """Make pytest-django create the PostgreSQL test database of ``settings_dict``
        (``DATABASES["default"]``) as a copy of the session's template instead of
        migrating it from scratch (its migrate then finds nothing to do). Does nothing
        without ``make test``'s services or for another engine."""
        admin_url = os.environ.get("AGENTOPS_PG_ADMIN_URL")
        if not admin_url or "postgresql" not in settings_dict["ENGINE"]:
            return
        settings_dict.setdefault("TEST", {})["TEMPLATE"] = self.postgres(admin_url)

    def cleanup(self) -> None:
        """In the session's owner process, drop the PostgreSQL templates and remove the
        SQLite ones; elsewhere nothing. Errors are ignored (the server may already be
        gone when atexit runs)."""
        if not is_session_owner():
            return
        admin_url = os.environ.get("AGENTOPS_PG_ADMIN_URL")
        if admin_url:
            with contextlib.suppress(Exception):
                import psycopg

                with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
                    prefix = f"agentops_tpl_{session_key()}_"
                    for (name,) in conn.execute(
                        "SELECT datname FROM pg_database WHERE starts_with(datname, %s)",
                        (prefix,),
                    ).fetchall():
                        drop_database(conn, name)
        self._postgres = {}
        self._sqlite = {}
        shutil.rmtree(self._workdir(), ignore_errors=True)


TEMPLATES = Templates()
atexit.register(TEMPLATES.cleanup)  # when used without the session fixture


class Deployment:
    """One isolated AgentOps installation for a test, driven through ``manage.py``.

    Attributes: ``root`` (its tmp dir: var/ plus the logs of ``popen`` processes),
    ``backend`` ("sqlite" or "postgres"), ``env`` (the subprocess environment; edit it
    to change later commands), ``database_url`` (postgres only), ``processes`` (every
    ``popen`` so far).
    """

    def __init__(
        self,
        root: Path,
        backend: str,
        env: dict[str, str],
        *,
        admin_url: str | None = None,
        db_name: str | None = None,
    ) -> None:
        self.root = root
        self.backend = backend
        self.env = env
        self.admin_url = admin_url
        self.db_name = db_name
        self.processes: list[subprocess.Popen] = []
        self._popen_count = itertools.count(1)
        self._probe: subprocess.Popen | None = None
        self._probe_env: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<Deployment {self.backend} {self.root}>"

    @property
    def database_url(self) -> str | None:
        """The PostgreSQL URL of this deployment's database, or None for SQLite."""
        return self.env.get("DATABASE_URL")

    @property
    def var_dir(self) -> Path:
        return Path(self.env["AGENTOPS_VAR_DIR"])

    def command(self, *args: object) -> list[str]:
        """The argv that runs ``manage.py *args`` with this test's Python (see
        ``manage_argv``)."""
        return manage_argv(*args)

    def manage(
        self, *args: object, timeout: float = 120, check: bool = False, input: str | None = None
    ) -> subprocess.CompletedProcess:
        """Run ``manage.py *args`` to completion; return it with text stdout/stderr.

        ``timeout`` is in seconds: past it the process is killed and ``ManageTimeout``
        raised. ``check=True`` raises ``ManageError`` (showing the output) on a non-zero
        exit. ``input`` is fed to stdin; without it stdin is empty (/dev/null).
        """
        proc = _run_manage(self.env, args, timeout=timeout, input=input)
        if check and proc.returncode != 0:
            raise ManageError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc

    def manage_json(self, *args: object, timeout: float = 120, input: str | None = None):
        """Run ``manage.py *args`` with ``check=True`` and return its stdout parsed as JSON.

        Raises ``ManageError`` on a non-zero exit and ``ValueError`` (with the output) if
        stdout is not JSON.
        """
        proc = self.manage(*args, timeout=timeout, check=True, input=input)
        try:
            return json.loads(proc.stdout)
        except ValueError as exc:
            raise ValueError(
                f"stdout is not JSON: {exc}\n{_describe(proc.args, proc.stdout, proc.stderr)}"
            ) from None

    def popen(
        self, *args: object, extra_env: Mapping[str, object] | None = None
    ) -> subprocess.Popen:
        """Start ``manage.py *args`` in the background and return its ``Popen``.

        stdout/stderr go to ``<root>/NN-<command>.stdout.log`` / ``.stderr.log``; their
        paths are set on the returned object as ``stdout_path`` / ``stderr_path`` (see
        ``logs()``). The process leads its own process group, so a SIGKILL drill can hit
        it alone (``proc.kill()``) or with its children (``os.killpg(proc.pid, ...)``).
        Teardown SIGKILLs whatever group is still alive.
        """
        env = dict(self.env)
        _apply_extra(env, extra_env)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(args[0]) if args else "manage")[:40]
        stem = self.root / f"{next(self._popen_count):02d}-{slug}"
        stdout_path = stem.with_name(stem.name + ".stdout.log")
        stderr_path = stem.with_name(stem.name + ".stderr.log")
        with (
            open(stdout_path, "w", encoding="utf-8") as out,
            open(stderr_path, "w", encoding="utf-8") as err,
        ):
            proc = subprocess.Popen(
                self.command(*args),
                env=env,
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                text=True,
                start_new_session=True,
            )
        proc.stdout_path = stdout_path  # type: ignore[attr-defined]
        proc.stderr_path = stderr_path  # type: ignore[attr-defined]
        self.processes.append(proc)
        return proc

    def shell(self, code: str, *, timeout: float = 120) -> str:
        """Run ``code`` as ``manage.py shell -c CODE`` runs it and return what it printed,
        in this deployment's long-lived shell probe (tests/support/shell_probe.py) rather
        than a new process. Raises ``ManageError`` (with the traceback) if the code
        raised, ``ManageTimeout`` after ``timeout`` seconds. Code that must die with its
        process (threads, sessions or locks it leaves behind) runs in
        ``manage("shell", "-c", code)`` instead."""
        return self._ask({"code": code}, timeout)

    def call(self, *args: object, timeout: float = 120) -> str:
        """Run the management command ``args`` in the shell probe through Django's
        ``call_command`` and return its stdout; for reads such as ``runs status RUN
        --json``. A test of the command line itself (exit status, stderr) uses
        ``manage``. Raises as ``shell`` does."""
        return self._ask({"command": [str(a) for a in args]}, timeout)

    def _ask(self, request: dict, timeout: float) -> str:
        if self._probe is None or self._probe.poll() is not None or self._probe_env != self.env:
            self._stop_probe()
            with open(self.root / "shell-probe.stderr.log", "a", encoding="utf-8") as err:
                self._probe = subprocess.Popen(
                    [sys.executable, "-m", "tests.support.shell_probe"],
                    env=self.env,
                    cwd=REPO_ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    start_new_session=True,
                )
            self._probe_env = dict(self.env)
        probe = self._probe
        assert probe.stdin is not None and probe.stdout is not None
        argv = ["shell_probe", json.dumps(request)[:200]]
        try:
            probe.stdin.write(json.dumps(request) + "\n")
            probe.stdin.flush()
        except BrokenPipeError:
            pass  # it died; the empty answer below says so with its stderr
        if not select.select([probe.stdout], [], [], timeout)[0]:
            self._stop_probe()
            raise ManageTimeout(argv, timeout)
        line = probe.stdout.readline()
        if not line:
            self._stop_probe()
            log = (self.root / "shell-probe.stderr.log").read_text(errors="replace")
            raise ManageError(1, argv, "", log[-4000:])
        answer = json.loads(line)
        if answer["error"]:
            raise ManageError(1, argv, answer["out"], answer["error"])
        return answer["out"]

    def _stop_probe(self) -> None:
        probe, self._probe = self._probe, None
        if probe is None:
            return
        with contextlib.suppress(OSError):
            probe.stdin.close()  # type: ignore[union-attr]
        try:
            probe.wait(timeout=10)
        except subprocess.TimeoutExpired:
            probe.kill()
            probe.wait()
        probe.stdout.close()  # type: ignore[union-attr]

    @staticmethod
    def logs(proc: subprocess.Popen) -> tuple[str, str]:
        """Return ``(stdout, stderr)`` written so far by a process from ``popen``."""
        return (
            Path(proc.stdout_path).read_text(encoding="utf-8", errors="replace"),  # type: ignore[attr-defined]
            Path(proc.stderr_path).read_text(encoding="utf-8", errors="replace"),  # type: ignore[attr-defined]
        )

    def kill_all(self) -> None:
        """SIGKILL every ``popen`` process group whose leader is still alive, and reap it.

        Only live leaders are signalled: once a leader is reaped its PID may belong to
        someone else.
        """
        for proc in self.processes:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def close(self) -> None:
        """Kill leftover processes and drop this deployment's PostgreSQL database.

        Safe to call twice. Files under ``root`` stay for pytest's tmp_path retention.
        """
        self._stop_probe()
        self.kill_all()
        if self.db_name and self.admin_url:
            import psycopg

            with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
                drop_database(conn, self.db_name)
            self.db_name = None


def make_deployment(
    tmp_path: Path, backend: str, extra_env: Mapping[str, object] | None = None
) -> Deployment:
    """Create a migrated, empty deployment rooted at ``tmp_path`` for ``backend``.

    ``backend`` is "sqlite" (file ``tmp_path/var/agentops.sqlite3``, no DATABASE_URL or
    REDIS_URL, so workers poll the database) or "postgres" (a fresh database cloned
    from the session's template on the ``make test`` server, and REDIS_URL after a
    FLUSHDB: the Redis db is shared, so two live postgres deployments see each other's
    queues). ``extra_env`` is overlaid last (``None`` removes a variable), e.g.
    ``{"AGENTOPS_LEASE_SECONDS": 2}``. Postgres skips/fails via ``require_services()``.
    The caller must ``close()`` it; the ``deployment_factory`` fixture does.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    tmp_path = Path(tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    env = _base_env(tmp_path)

    if backend == "sqlite":
        shutil.copyfile(TEMPLATES.sqlite(), env["AGENTOPS_SQLITE_PATH"])
        _apply_extra(env, extra_env)
        return Deployment(tmp_path, backend, env)

    require_services()
    import psycopg
    import redis
    from psycopg import sql

    admin_url = os.environ["AGENTOPS_PG_ADMIN_URL"]
    template = TEMPLATES.postgres(admin_url)
    db_name = f"agentops_t_{os.getpid()}_{next(_counter)}_{secrets.token_hex(3)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            # FILE_COPY measured ~0.1 s per clone here against ~0.3 s for PG15's default
            # WAL_LOG, which writes every page (system catalogs too) through the WAL.
            sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                sql.Identifier(db_name), sql.Identifier(template)
            )
        )
    deployment = Deployment(tmp_path, backend, env, admin_url=admin_url, db_name=db_name)
    try:
        env["DATABASE_URL"] = with_database(admin_url, db_name)
        env["REDIS_URL"] = os.environ["REDIS_URL"]
        client = redis.Redis.from_url(env["REDIS_URL"])
        try:
            client.flushdb()
        finally:
            client.close()
        _apply_extra(env, extra_env)
    except BaseException:
        deployment.close()
        raise
    return deployment
