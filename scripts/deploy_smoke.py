#!/usr/bin/env python3
"""Bring the production topology of docs/deploy.md up on loopback, smoke-test it, tear it
down.

Usage (from a checkout whose .venv is installed, e.g. ``make deploy-smoke``)::

    .venv/bin/python scripts/deploy_smoke.py [--keep]

What runs, each on a free 127.0.0.1 port in one temp dir: PostgreSQL (a fresh cluster,
as scripts/with_services.py starts it), Redis started with ``deploy/redis/agentops.conf``
(AOF on), and, with the settings of ``deploy/agentops.env`` (paths, ports and secrets
pointed into the temp dir; secrets through ``*_FILE``), two ``manage.py worker``
processes, ``manage.py sweeper`` and uvicorn with the arguments of
``deploy/systemd/agentops-web.service``. Requests carry ``X-Forwarded-Proto: https`` and
the public host name, as nginx would send them.

The smoke test: ``check --deploy`` reports nothing; the lab is out (``help`` lists none
of its commands, ``runs start --help`` no fault flag); ``collectstatic`` fills the static
root; ``/healthz`` and ``/readyz`` answer 200 without login; a run of ``smoke_hold``
(``scripts/smoke_workflow.py``, registered as a deployment registers its own workflows;
its first attempt blocks until its worker dies) is created through the API with a token,
its SSE stream is followed, the worker that started it is SIGKILLed, the other one
finishes it and the stream ends with ``run.succeeded``; with PostgreSQL stopped,
``/readyz`` answers 503 and ``/healthz`` still 200. Everything started is stopped by its
PID; the temp dir is removed unless ``--keep``.

Prints one line per check and exits 0 when all pass, 1 when one fails (with the tails of
the process logs), 2 when the topology could not be started.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import with_services  # noqa: E402 - a sibling script, not a package

PUBLIC_HOST = "agentops.example.com"
#: A short lease so the SIGKILLed worker's step is re-claimed within seconds.
LEASE_SECONDS = 4
#: The lab's commands (by the files that define them): the production settings offer none.
LAB_COMMANDS = sorted(
    p.stem for p in (REPO / "lab/management/commands").glob("*.py") if not p.name.startswith("_")
)
WEB_ARGS = ["--workers", "2", "--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"]


class SmokeFailure(Exception):
    """A check did not hold; the message says what was expected and what came."""


def say(msg: str) -> None:
    print(f"deploy_smoke: {msg}", flush=True)


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a systemd EnvironmentFile (comments and blanks skipped)."""
    env = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env


class Topology:
    """The services and the AgentOps processes of one smoke run (module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir()
        self.services: with_services.Services | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.env: dict[str, str] = {}
        self.web_port = 0

    # -- start ---------------------------------------------------------------------------
    def start_services(self) -> None:
        pg_bin, reason = with_services.find_pg_bin()
        redis_bin = shutil.which("redis-server")
        if pg_bin is None or redis_bin is None:
            raise RuntimeError(reason or "redis-server not found on PATH")
        self.services = with_services.Services(
            pg_bin, redis_bin, keep_data=False, redis_conf=REPO / "deploy/redis/agentops.conf"
        )
        self.services.start()
        say(
            f"PostgreSQL 127.0.0.1:{self.services.pg_port}, "
            f"Redis (AOF) 127.0.0.1:{self.services.redis_port}"
        )

    def build_env(self) -> None:
        assert self.services is not None
        secrets_dir = self.root / "secrets"
        secrets_dir.mkdir(mode=0o700)
        service_env = self.services.env()
        files = {
            "secret_key": secrets.token_urlsafe(50),
            "database_url": service_env["DATABASE_URL"] + "?connect_timeout=5",
            # The production file names a model and its key file; no model is asked.
            "openai_api_key": "smoke-test-no-model-is-called",
        }
        for name, value in files.items():
            path = secrets_dir / name
            path.write_text(value + "\n", encoding="utf-8")
            path.chmod(0o600)
        var = self.root / "var"
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG")
        }
        env.update(read_env_file(REPO / "deploy/agentops.env"))
        env.update(
            {
                "SECRET_KEY_FILE": str(secrets_dir / "secret_key"),
                "DATABASE_URL_FILE": str(secrets_dir / "database_url"),
                "OPENAI_API_KEY_FILE": str(secrets_dir / "openai_api_key"),
                "REDIS_URL": service_env["REDIS_URL"],
                "AGENTOPS_VAR_DIR": str(var),
                "AGENTOPS_MEDIA_ROOT": str(var / "artifacts"),
                "AGENTOPS_STATIC_ROOT": str(var / "static"),
                "AGENTOPS_LEASE_SECONDS": str(LEASE_SECONDS),
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(REPO / "scripts"), env.get("PYTHONPATH", "")) if p
                ),
                "AGENTOPS_EXTRA_WORKFLOW_MODULES": "smoke_workflow",
                "AGENTOPS_SWEEP_SECONDS": "1",
            }
        )
        self.env = env

    def manage(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(REPO / "manage.py"), *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        with open(self.logs / f"{name}.log", "w", encoding="utf-8") as log:
            proc = subprocess.Popen(
                argv,
                env=self.env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def start_processes(self) -> None:
        python = sys.executable
        for n in (1, 2):
            self.spawn(f"worker-{n}", [python, "manage.py", "worker"])
        self.spawn("sweeper", [python, "manage.py", "sweeper"])
        self.web_port = with_services.free_port()
        self.spawn(
            "web",
            [
                python,
                "-m",
                "uvicorn",
                "agentops.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.web_port),
                *WEB_ARGS,
                "--timeout-graceful-shutdown",
                "5",
            ],
        )

    # -- HTTP ----------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        body: dict | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> tuple[int, dict | str]:
        """One request as nginx would pass it on; returns (status, JSON body or text)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.web_port, timeout=timeout)
        try:
            all_headers = {"Host": PUBLIC_HOST, "X-Forwarded-Proto": "https", **(headers or {})}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                all_headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=all_headers)
            response = conn.getresponse()
            text = response.read().decode("utf-8", errors="replace")
        finally:
            conn.close()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text

    def wait_http(self, path: str, status: int, timeout: float = 60) -> dict | str:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            self.check_alive()
            with contextlib.suppress(OSError):
                # Longer than the database's connect_timeout (5 s), which a readiness
                # check may wait out while the server shuts down.
                got, body = self.request("GET", path, timeout=15)
                if got == status:
                    return body
                last = (got, body)
            time.sleep(0.2)
        raise SmokeFailure(f"GET {path}: wanted {status} within {timeout:.0f}s, last {last}")

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None and not getattr(proc, "killed_on_purpose", False):
                raise SmokeFailure(f"{name} exited with {proc.returncode}")

    # -- stop ----------------------------------------------------------------------------
    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        for name, proc in self.procs.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"{name} ignored SIGTERM; SIGKILL")
                proc.kill()
                proc.wait()
        if self.services is not None:
            self.services.stop()
            self.services = None

    def log_tails(self, lines: int = 25) -> str:
        out = []
        for path in sorted(self.logs.glob("*.log")):
            out.append(f"--- {path.name} ---\n{with_services.tail(path, lines)}")
        return "\n".join(out)


def follow_stream(topo: Topology, run_id: str, token: str, on_event, timeout: float) -> list[dict]:
    """Read ``/api/v1/runs/{run_id}/stream`` until the server ends it; call
    ``on_event(event)`` for each event; return them all. Raises ``SmokeFailure`` past
    ``timeout`` seconds."""
    conn = http.client.HTTPConnection("127.0.0.1", topo.web_port, timeout=timeout)
    deadline = time.monotonic() + timeout
    events: list[dict] = []
    try:
        conn.request(
            "GET",
            f"/api/v1/runs/{run_id}/stream",
            headers={
                "Host": PUBLIC_HOST,
                "X-Forwarded-Proto": "https",
                "Authorization": f"Bearer {token}",
                "Accept": "text/event-stream",
            },
        )
        response = conn.getresponse()
        if response.status != 200:
            raise SmokeFailure(f"stream answered {response.status}: {response.read()[:500]!r}")
        data: list[str] = []
        while True:
            if time.monotonic() > deadline:
                raise SmokeFailure(f"stream still open after {timeout:.0f}s")
            raw = response.readline()
            if not raw:
                return events  # the server ended the stream: the run is terminal
            line = raw.decode("utf-8").rstrip("\n")
            if line.startswith("data:"):
                data.append(line[5:].strip())
            elif not line and data:
                event = json.loads("".join(data))
                data = []
                events.append(event)
                on_event(event)
    finally:
        conn.close()


def smoke(topo: Topology) -> None:
    """The checks of the module docstring, in order; raises ``SmokeFailure``."""
    check = topo.manage("check", "--deploy", "--fail-level", "WARNING")
    if check.returncode != 0 or "no issues" not in check.stdout + check.stderr:
        raise SmokeFailure(f"check --deploy:\n{check.stdout}{check.stderr}")
    say("check --deploy: no issues")
    listed = topo.manage("help").stdout.split()
    offered = [c for c in ("[lab]", *LAB_COMMANDS) if c in listed]
    usage = topo.manage("runs", "start", "--help").stdout
    if offered or "--crash-before" in usage or "usage:" not in usage:
        raise SmokeFailure(f"the lab is installed: help lists {offered}\n{usage}")
    say("the lab is out: no lab command, no fault flag")
    for args in (("migrate", "--noinput"), ("collectstatic", "--noinput")):
        proc = topo.manage(*args)
        if proc.returncode != 0:
            raise SmokeFailure(f"{' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    static_files = [p for p in Path(topo.env["AGENTOPS_STATIC_ROOT"]).rglob("*") if p.is_file()]
    if not static_files:
        raise SmokeFailure("collectstatic left the static root empty")
    say(f"migrate; collectstatic: {len(static_files)} files")
    user = topo.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; "
        "get_user_model().objects.create_user('smoke', password=None)",
    )
    token = topo.manage("api_token", "create", "smoke", "--name", "deploy smoke")
    if user.returncode != 0 or token.returncode != 0:
        raise SmokeFailure(f"user/token:\n{user.stderr}{token.stderr}")
    token_value = token.stdout.strip()

    topo.start_processes()
    topo.wait_http("/healthz", 200)
    ready = topo.wait_http("/readyz", 200)
    say(f"/healthz 200; /readyz 200 {json.dumps(ready)}")

    status, created = topo.request(
        "POST",
        "/api/v1/runs",
        body={"workflow": "smoke_hold", "thread_id": "smoke", "input": {}},
        headers={"Authorization": f"Bearer {token_value}", "Idempotency-Key": "smoke-1"},
    )
    if status != 201 or not isinstance(created, dict):
        raise SmokeFailure(f"POST /api/v1/runs: {status} {created}")
    run_id = created["id"]
    say(f"run {run_id} created through the API (201)")

    worker_pids = {topo.procs[f"worker-{n}"].pid: f"worker-{n}" for n in (1, 2)}
    killed: dict[str, str] = {}

    def on_event(event: dict) -> None:
        if event["type"] != "step.started" or killed:
            return
        match = re.match(r"^[^:]*:(\d+):", event.get("actor") or "")
        name = worker_pids.get(int(match.group(1))) if match else None
        if name is None:
            raise SmokeFailure(f"step started by an unknown actor: {event}")
        proc = topo.procs[name]
        proc.killed_on_purpose = True  # type: ignore[attr-defined]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed.update(name=name, actor=event["actor"])
        say(f"{name} (pid {proc.pid}) started the step: SIGKILLed it")

    events = follow_stream(topo, run_id, token_value, on_event, timeout=180)
    types = [e["type"] for e in events]
    if not killed:
        raise SmokeFailure(f"no step.started seen on the stream: {types}")
    if not types or types[-1] != "run.succeeded":
        raise SmokeFailure(f"stream ended without run.succeeded: {types}")
    finishers = {e["actor"] for e in events if e["type"] == "step.succeeded"}
    if killed["actor"] in finishers or not finishers:
        raise SmokeFailure(f"the step was not finished by another worker: {finishers}")
    seqs = [e["seq"] for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        raise SmokeFailure(f"stream seqs not gap-free from 1: {seqs}")
    say(f"SSE stream: {len(events)} events, ended with run.succeeded by {finishers.pop()}")
    status, run = topo.request(
        "GET", f"/api/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token_value}"}
    )
    if status != 200 or not isinstance(run, dict) or run.get("status") != "SUCCEEDED":
        raise SmokeFailure(f"GET run: {status} {run}")
    say("GET /api/v1/runs/{id}: SUCCEEDED")
    topo.wait_http("/readyz", 200)

    assert topo.services is not None
    topo.services._stop_postgres()
    body = topo.wait_http("/readyz", 503, timeout=90)
    if not isinstance(body, dict) or body["checks"]["redis"] != "ok":
        raise SmokeFailure(f"/readyz with the database stopped: {body}")
    topo.wait_http("/healthz", 200, timeout=10)
    say(f"database stopped: /readyz 503 {json.dumps(body)}; /healthz 200")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="agentops-deploy-"))
    topo = Topology(root)
    started = time.monotonic()
    try:
        try:
            topo.start_services()
            topo.build_env()
        except (RuntimeError, with_services.ServiceError, OSError) as exc:
            say(f"ERROR starting the topology: {exc}")
            return 2
        try:
            smoke(topo)
        except (SmokeFailure, OSError, subprocess.SubprocessError) as exc:
            say(f"FAILED: {exc}\n{topo.log_tails()}")
            return 1
        say(f"all checks passed in {time.monotonic() - started:.0f}s")
        return 0
    finally:
        topo.stop()
        if args.keep:
            say(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
