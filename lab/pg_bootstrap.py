"""Throwaway PostgreSQL servers and migrated template databases: the one way the lab
starts a scratch server (``scripts/with_services.py`` for ``make test`` and CI, the
drills' own ``PgCluster``, the tests) and builds a template database (the tests'
deployments, the drills' sandbox).

A plain module, standard library only at import time (psycopg is imported where a
template is built): ``scripts/with_services.py`` imports it before a virtualenv or
Django settings may exist.

``PgServer`` is one cluster in a directory of its own: ``initdb`` (trust auth, UTF8,
locale C, no sync) as an unprivileged OS user when we are root (PostgreSQL refuses
root), on a free 127.0.0.1 port (retried when someone takes the port first), its own
settings in ``agentops.conf`` beside ``postgresql.conf`` so a plain ``pg_ctl start``
later keeps port and settings. ``ensure_template`` builds one migrated template per
``migrations_hash()`` under an advisory lock, so concurrent builders wait and reuse it.
"""

from __future__ import annotations

import contextlib
import getpass
import glob
import hashlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
MANAGE_PY = REPO_ROOT / "manage.py"
#: The server binaries a cluster of our own needs.
PG_SERVER_TOOLS = ("pg_ctl", "initdb", "postgres")
#: The unprivileged OS user PostgreSQL runs as when we are root, unless named otherwise.
RUN_AS_DEFAULT = "agentops"
#: A free port can be taken by someone else before the server binds it.
START_ATTEMPTS = 3
#: Key of the PostgreSQL advisory lock under which one process builds a template.
TEMPLATE_LOCK = 0x61676F70  # "agop"
#: Seconds a template's ``migrate`` may take (a cold migrate on a loaded 2-core machine).
MIGRATE_TIMEOUT = 600


class ServiceError(Exception):
    """A server could not be found, started or prepared; the message says why (with the
    tail of its log where there is one)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the caller retries on a race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a text file, or a note if it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def find_pg_bin() -> tuple[Path | None, str]:
    """The directory of the PostgreSQL server binaries: ``(dir, "")`` or ``(None, why)``.

    Looks at ``AGENTOPS_PG_BIN``, then ``pg_ctl`` on PATH (the target of its symlink
    first: Debian's /usr/bin links lack ``initdb`` and ``pg_isready``), then the newest
    ``/usr/lib/postgresql/*/bin``; the first holding all of ``PG_SERVER_TOOLS`` wins.
    """
    candidates: list[Path] = []
    if os.environ.get("AGENTOPS_PG_BIN"):
        candidates.append(Path(os.environ["AGENTOPS_PG_BIN"]))
    found = shutil.which("pg_ctl")
    if found:
        candidates += [Path(os.path.realpath(found)).parent, Path(found).parent]

    def major(path: str) -> int:
        name = Path(path).parent.name
        return int(name) if name.isdigit() else 0

    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=major, reverse=True)
    candidates += [Path(p) for p in versions]
    for cand in candidates:
        if all(os.access(cand / tool, os.X_OK) for tool in PG_SERVER_TOOLS):
            return cand, ""
    return None, (
        "PostgreSQL server binaries (pg_ctl, initdb, postgres) not found on PATH, "
        "in AGENTOPS_PG_BIN or under /usr/lib/postgresql"
    )


def pg_tool(bin_dir: Path, name: str) -> str | None:
    """The path of a PostgreSQL client tool, preferring ``bin_dir``, else PATH."""
    cand = bin_dir / name
    if os.access(cand, os.X_OK):
        return str(cand)
    return shutil.which(name)


def unprivileged_user() -> pwd.struct_passwd | None:
    """When root, the OS user PostgreSQL runs as; ``None`` when not root (it then runs as
    ourselves).

    The name is ``AGENTOPS_PG_RUN_AS`` (what ``scripts/with_services.py`` exports to its
    command), else ``AGENTOPS_PG_USER``, else ``agentops``; a missing user is created as
    a system user without a home or shell. Raises ``ServiceError`` if it cannot be.
    """
    if os.geteuid() != 0:
        return None
    name = (
        os.environ.get("AGENTOPS_PG_RUN_AS") or os.environ.get("AGENTOPS_PG_USER") or RUN_AS_DEFAULT
    )
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    proc = subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir"]
        + ["/nonexistent", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
        check=False,
    )
    # A concurrent caller may have created it between our lookup and useradd.
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    raise ServiceError(f"cannot create user {name!r} to run PostgreSQL: {proc.stderr.strip()}")


def parent_death_signal(signum: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``signum`` when this process dies (even
    by SIGKILL), so a killed caller does not leak servers. Linux only; elsewhere (or if
    libc cannot be loaded) ``None``. The signal follows the calling *thread*: use it only
    from a thread that lives as long as the child should."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)  # loaded here, not in the forked child
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(1, signum)  # 1 = PR_SET_PDEATHSIG; runs after setuid, which would clear it

    return preexec


def _no_interrupt() -> None:
    return None


class PgServer:
    """A throwaway PostgreSQL cluster in ``root`` (module docstring).

    ``bin_dir``: the server binaries (``find_pg_bin``). ``fsync=False`` skips fsync and
    full page writes (throwaway data). ``listen``: the addresses it listens on;
    ``clients``: more client addresses it trusts besides loopback; ``conf``: more
    ``postgresql.conf`` settings; ``max_connections``: its connection limit. The
    superuser is named after the OS user we run as (``user``), so clients connect
    without a password. Attributes after ``start``: ``port``, ``data``, ``log``,
    ``run_as`` (the ``pwd`` entry, or ``None``). Raises ``ServiceError``.
    """

    def __init__(
        self,
        bin_dir: Path,
        root: Path,
        *,
        fsync: bool = True,
        listen: tuple[str, ...] = ("127.0.0.1",),
        clients: tuple[str, ...] = (),
        conf: Mapping[str, object] | None = None,
        max_connections: int = 200,
    ) -> None:
        self.bin = bin_dir
        self.root = Path(root)
        self.fsync = fsync
        self.listen = listen
        self.clients = clients
        self.conf = dict(conf or {})
        self.max_connections = max_connections
        self.run_as = unprivileged_user()
        self.user = self.run_as.pw_name if self.run_as else getpass.getuser()
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def data(self) -> Path:
        return self.root / "pgdata"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    @property
    def server(self) -> dict[str, str]:
        """Connection parameters: ``host``, ``port``, ``user``, ``password`` (empty)."""
        return {"host": "127.0.0.1", "port": str(self.port), "user": self.user, "password": ""}

    def url(self, database: str) -> str:
        """``postgres://USER@127.0.0.1:PORT/DATABASE``."""
        return f"postgres://{quote(self.user)}@127.0.0.1:{self.port}/{database}"

    def _as_run_as(self) -> dict[str, Any]:
        """Popen keyword arguments that run a child as the unprivileged user, if any."""
        if self.run_as is None:
            return {}
        return {"user": self.run_as.pw_uid, "group": self.run_as.pw_gid, "extra_groups": []}

    def run_pg(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run the server binary ``args[0]`` (``pg_ctl``, ``initdb``) with ``args[1:]`` to
        completion as the server's OS user; its output is captured as text."""
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd=self.root,
            **self._as_run_as(),
        )

    def client_args(self) -> list[str]:
        """The arguments that point a PostgreSQL client tool at this server."""
        return ["-h", "127.0.0.1", "-p", str(self.port), "-U", self.user]

    # -- start ---------------------------------------------------------------------------
    def init(self) -> None:
        """``initdb`` the cluster in ``root/pgdata``; ``root`` is created if missing."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.run_as is not None:
            # The server writes its data dir and log here; root can still read it all.
            os.chown(self.root, self.run_as.pw_uid, self.run_as.pw_gid)
        proc = self.run_pg(
            "initdb",
            "-D",
            str(self.data),
            "--auth=trust",
            f"--username={self.user}",
            "--encoding=UTF8",
            "--locale=C",
            # Throwaway cluster: initdb's own fsyncs are time lost.
            "--no-sync",
            timeout=180,
        )
        if proc.returncode != 0:
            raise ServiceError(
                f"initdb failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as fh:
            # Our settings live in their own file so a port retry can rewrite them.
            fh.write("\ninclude 'agentops.conf'\n")
        with open(self.data / "pg_hba.conf", "a", encoding="utf-8") as fh:
            fh.writelines(f"host all all {address}/32 trust\n" for address in self.clients)
        self.log.touch()
        if self.run_as is not None:
            # A restart with `pg_ctl -l LOG` runs as run_as and appends to it.
            os.chown(self.log, self.run_as.pw_uid, self.run_as.pw_gid)

    def _write_conf(self) -> None:
        durable = "on" if self.fsync else "off"
        lines = [
            f"listen_addresses = '{', '.join(self.listen)}'",
            f"port = {self.port}",
            "unix_socket_directories = ''",  # TCP only: no /var/run/postgresql needed
            f"max_connections = {self.max_connections}",
            "synchronous_commit = on",
            f"fsync = {durable}",
            f"full_page_writes = {durable}",
            "log_line_prefix = '%m [%p] %q%u@%d '",
            *(f"{name} = '{value}'" for name, value in self.conf.items()),
        ]
        (self.data / "agentops.conf").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def start(
        self, *, as_child: bool = False, check_interrupt: Callable[[], None] = _no_interrupt
    ) -> None:
        """Start the server on a free port and wait until it accepts connections.

        ``as_child``: the postmaster runs as our own child, which gets SIGQUIT (immediate
        shutdown) when this thread's process dies, even by SIGKILL; otherwise ``pg_ctl
        start`` daemonizes it (a drill that stops and starts it from any thread).
        ``check_interrupt()`` is called between steps and may raise. Raises
        ``ServiceError`` with the tail of the log when it does not come up.
        """
        for attempt in range(1, START_ATTEMPTS + 1):
            check_interrupt()
            self.port = free_port()
            self._write_conf()
            offset = self.log.stat().st_size
            if as_child:
                up = self._start_child(check_interrupt)
            else:
                up = self.restart(raise_error=False)
            if up:
                return
            new_log = self.log.read_text(errors="replace")[offset:]
            if "Address already in use" not in new_log or attempt == START_ATTEMPTS:
                raise ServiceError(
                    f"PostgreSQL did not start on port {self.port}\n--- {self.log} ---\n"
                    f"{tail(self.log)}"
                )

    def _start_child(self, check_interrupt: Callable[[], None]) -> bool:
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data)],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
                preexec_fn=parent_death_signal(signal.SIGQUIT),
                **self._as_run_as(),
            )
        if self._wait_ready(check_interrupt):
            return True
        self.proc.wait()
        self.proc = None
        return False

    def _wait_ready(self, check_interrupt: Callable[[], None], timeout: float = 60.0) -> bool:
        """Wait until our child postmaster accepts connections: True; False if it exited.
        Raises ``ServiceError`` if it is not ready after ``timeout`` seconds."""
        assert self.proc is not None
        pg_isready = pg_tool(self.bin, "pg_isready")
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if pg_isready:
                argv = [pg_isready, "-q", *self.client_args(), "-d", "postgres", "-t", "2"]
                ready = subprocess.run(argv, check=False, stdin=subprocess.DEVNULL).returncode == 0
            else:  # no client tools: an accepted TCP connection is the best we can see
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    ready = True
                except OSError:
                    ready = False
            if ready:
                return True
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"PostgreSQL on port {self.port} not ready after {timeout:.0f}s\n"
                    f"--- {self.log} ---\n{tail(self.log)}"
                )
            check_interrupt()
            time.sleep(0.05)
        return False

    def restart(self, *, raise_error: bool = True) -> bool:
        """``pg_ctl start`` (daemonized, same port and settings) and wait until it is up.
        Returns True; False (or ``ServiceError`` under ``raise_error``) if it failed."""
        proc = self.run_pg(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start"
        )
        if proc.returncode and raise_error:
            raise ServiceError(f"pg_ctl start failed: {proc.stderr[-1000:]}")
        return proc.returncode == 0

    def create_database(self, name: str) -> None:
        """``CREATE DATABASE name`` with the client tools (``createdb``, else ``psql``)."""
        createdb = pg_tool(self.bin, "createdb")
        if createdb:
            args = [createdb, *self.client_args(), name]
        else:
            psql = pg_tool(self.bin, "psql")
            if not psql:
                raise ServiceError("neither createdb nor psql found to create the database")
            args = [psql, *self.client_args(), "-d", "postgres", "-v", "ON_ERROR_STOP=1"]
            args += ["-c", f'CREATE DATABASE "{name}"']
        proc = subprocess.run(
            args, capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL
        )
        if proc.returncode != 0:
            raise ServiceError(f"creating database {name!r} failed: {proc.stderr.strip()}")

    # -- stop ----------------------------------------------------------------------------
    def stop(self, mode: str = "fast", *, say: Callable[[str], None] = lambda msg: None) -> None:
        """Stop the server, whoever started it last: ``pg_ctl stop -m MODE``, then
        ``immediate``, then SIGKILL of the postmaster; reaps our own child. Safe when it
        is not running. ``say`` is told about each fallback."""
        pidfile = self.data / "postmaster.pid"
        if pidfile.exists():
            for each in dict.fromkeys((mode, "immediate")):
                try:
                    argv = ["pg_ctl", "-D", str(self.data), "-m", each, "-w", "-t", "30", "-s"]
                    proc = self.run_pg(*argv, "stop", timeout=45)
                    if proc.returncode == 0 or not pidfile.exists():
                        break
                    say(f"pg_ctl stop -m {each} failed: {proc.stderr.strip()}")
                except subprocess.TimeoutExpired:
                    say(f"pg_ctl stop -m {each} timed out")
            else:
                # Last resort: the postmaster's PID is the first line of postmaster.pid.
                try:
                    pid = int(pidfile.read_text().split()[0])
                    os.kill(pid, signal.SIGKILL)
                    say(f"killed postmaster {pid}")
                except (OSError, ValueError, IndexError) as exc:
                    say(f"could not kill postmaster: {exc}")
        child, self.proc = self.proc, None
        if child is not None:  # reap our own postmaster (or kill it if it is still up)
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def migrations_hash() -> str:
    """A hex sha256 over everything that decides the migrated schema: every
    ``<app>/migrations/*.py`` of the repository, settings.py (installed apps) and
    pyproject.toml (pinned Django and third-party apps), by relative path and content."""
    digest = hashlib.sha256()
    files = sorted(REPO_ROOT.glob("*/migrations/*.py"))
    files += [REPO_ROOT / "agentops" / "settings.py", REPO_ROOT / "pyproject.toml"]
    for path in files:
        if not path.is_file():
            continue
        digest.update(str(path.relative_to(REPO_ROOT)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def drop_database(conn: Any, name: str) -> None:
    """Drop database ``name`` through the autocommit psycopg connection ``conn`` if it
    exists, even if it is a template or has sessions."""
    from psycopg import sql

    exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    if not exists:
        return
    conn.execute(sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE false").format(sql.Identifier(name)))
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def ensure_template(admin_url: str, name: str, env: Mapping[str, str]) -> str:
    """The migrated template database ``name`` on the server of ``admin_url`` (a URL of
    its ``postgres`` database), built if missing and returned.

    The build runs ``manage.py migrate`` in a subprocess with ``env`` and DATABASE_URL
    pointing at the new database, under an advisory lock (a concurrent builder waits,
    then reuses it), and marks it a template that allows no connections (``CREATE
    DATABASE ... TEMPLATE`` fails while anyone is connected to it). A half-built one
    left by a process that died is rebuilt. Callers name it with ``migrations_hash()``
    so a changed schema gets a new one. Raises ``ServiceError`` with the tail of the
    migrate output if it fails (nothing is left behind then).
    """
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (TEMPLATE_LOCK,))
        try:
            ready = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s AND datistemplate", (name,)
            ).fetchone()
            if ready:
                return name
            drop_database(conn, name)
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            try:
                _migrate(env, with_database(admin_url, name))
                conn.execute(
                    sql.SQL(
                        "ALTER DATABASE {} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"
                    ).format(sql.Identifier(name))
                )
            except BaseException:
                drop_database(conn, name)
                raise
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (TEMPLATE_LOCK,))
    return name


def with_database(url: str, name: str) -> str:
    """The PostgreSQL URL ``url`` with its database (path) replaced by ``name``."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _migrate(env: Mapping[str, str], database_url: str) -> None:
    argv = [sys.executable, str(MANAGE_PY), "migrate", "--noinput", "-v", "0"]
    try:
        proc = subprocess.run(
            argv,
            env={**env, "DATABASE_URL": database_url},
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=MIGRATE_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise ServiceError(f"migrate of a template ran past {MIGRATE_TIMEOUT}s") from None
    if proc.returncode != 0:
        raise ServiceError(
            f"migrate of a template failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
        )
