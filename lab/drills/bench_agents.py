"""``bench`` part ``agents``: steps that wait on a model, as agent steps do.

R ``bench_agent`` runs of ``WAIT_STEPS`` steps; each step asks an OpenAI-compatible
model server on loopback (``WaitingModelServer``, answering after S seconds) through the
real client (``AGENTOPS_MODEL=openai:...``, the ``openai`` SDK under Pydantic AI), and W
worker processes of N execution slots drain them. Reported: steps/s and its ratio to
the ideal ``min(W x N, R) / S`` (a step can do no better than wait S seconds, and a run
has one step in flight at a time), the average steps in flight, peak RSS per process,
peak PostgreSQL connections of the sandbox database, worker CPU per step, and the model
requests the server answered and read (one per step when none was made twice) and the
step attempts after the first (a retried step asks again). Nothing asserts on time.
"""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from lab.drills.loopback import LoopbackHTTPServer
from lab.drills.sandbox import MANAGE_PY, Sandbox, wait_until
from lab.workflows.synthetic import WAIT_STEPS
from runs.engine.control.lifecycle import start_run
from runs.models import Run, Step
from runs.states import RunStatus, StepStatus


class WaitingModelServer:
    """A chat-completions server on 127.0.0.1 that answers every request after
    ``delay`` seconds, each on its own thread. ``with WaitingModelServer(1.0) as s:``
    serves on ``s.base_url``; ``s.count`` is the number of requests answered,
    ``s.received`` the number read (a request whose client hung up is read, not answered)."""

    def __init__(self, delay: float):
        self.delay = delay
        self.count = 0
        self.received = 0
        self._lock = threading.Lock()
        self._httpd = LoopbackHTTPServer(("127.0.0.1", 0), self._handler())
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> "WaitingModelServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with server._lock:
                    server.received += 1
                time.sleep(server.delay)
                data = json.dumps(
                    {
                        "id": "chatcmpl-bench",
                        "object": "chat.completion",
                        "created": 1,
                        "model": body.get("model", "bench"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "done"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                with server._lock:
                    server.count += 1

        return Handler


def _database_connections() -> int:
    """Client connections to this (sandbox) database, the bench's own left out."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return cur.fetchone()[0]


def bench_agents(
    runs: int, wait_s: float, workers: int, slots: int, say, *, timeout: float | None = None
) -> dict:
    """Run the part (module docstring) in its own sandbox; returns its figures."""
    total = runs * WAIT_STEPS
    say(
        f"agents: {runs} runs x {WAIT_STEPS} steps waiting {wait_s}s on a loopback model, "
        f"{workers} workers x {slots} slots"
    )
    with WaitingModelServer(wait_s) as model:
        env = {
            "AGENTOPS_MODEL": "openai:bench",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "bench",
            "AGENTOPS_WORKER_CONCURRENCY": str(slots),
        }
        with Sandbox("agents", env=env) as box:
            for i in range(runs):
                start_run("bench_agent", thread_id=f"agents-{i}", input={}, actor="bench")
            probes = [box.root / f"probe-{i}.json" for i in range(workers)]
            for probe in probes:
                box.start_worker(probe_file=probe)
            peak_connections = 0

            def finished() -> bool:
                nonlocal peak_connections
                peak_connections = max(peak_connections, _database_connections())
                return Run.objects.filter(status=RunStatus.SUCCEEDED).count() == runs

            done = wait_until(
                finished, timeout=timeout or max(300, 10 * total * wait_s / slots), interval=0.2
            )
            box.stop_workers(timeout=60 + wait_s * WAIT_STEPS)
            spans = list(
                Step.objects.filter(status=StepStatus.SUCCEEDED).values_list(
                    "started_at", "finished_at"
                )
            )
            retries = sum(a - 1 for a in Step.objects.values_list("attempt", flat=True) if a > 1)
            counts = [json.loads(p.read_text()) for p in probes if p.exists()]
            failed = box.dead_workers(tail=3) if not done else []
    return agents_figures(
        spans,
        counts,
        runs=runs,
        wait_s=wait_s,
        workers=workers,
        slots=slots,
        completed=bool(done),
        peak_pg_connections=peak_connections,
        model_requests=model.count,
        model_requests_received=model.received,
        step_retries=retries,
        steps_expected=total,
        dead_workers=failed,
    )


def agents_figures(spans: list[tuple], counts: list[dict], **about) -> dict:
    """The figures of the part from the succeeded steps' ``(started_at, finished_at)``
    and the workers' probe counts (``lab.drills.probe``)."""
    if not spans:
        return {**about, "steps": 0, "steps_per_s": None}
    first = min(s for s, _ in spans)
    last = max(f for _, f in spans)
    elapsed = (last - first).total_seconds()
    busy = sum((f - s).total_seconds() for s, f in spans)
    per_s = len(spans) / elapsed if elapsed > 0 else None
    ideal = min(about["workers"] * about["slots"], about["runs"]) / about["wait_s"]
    executed = sum(c["steps"] for c in counts) or len(spans)
    return {
        **about,
        "steps": len(spans),
        "elapsed_s": round(elapsed, 3),
        "steps_per_s": round(per_s, 1) if per_s else None,
        "ideal_steps_per_s": round(ideal, 1),
        "ratio_to_ideal": round(per_s / ideal, 3) if per_s else None,
        "avg_steps_in_flight": round(busy / elapsed, 1) if elapsed > 0 else None,
        "peak_worker_rss_mb": (
            round(max(c["max_rss_kb"] for c in counts) / 1024, 1) if counts else None
        ),
        "db_round_trips_per_step": (
            round(sum(c["round_trips"] for c in counts) / executed, 2) if counts else None
        ),
        "cpu_ms_per_step": (
            round(1000 * sum(c["cpu_s_working"] for c in counts) / executed, 2)
            if counts and all("cpu_s_working" in c for c in counts)
            else None
        ),
        "notes": "steps/s over the first step's start to the last step's commit; ideal = "
        "min(workers x slots, runs) / wait; in flight = the steps' summed claim-to-commit "
        "time over that span; connections sampled every 0.2 s from pg_stat_activity.",
    }


def bench_agents_sqlite(runs: int, wait_s: float, slots: int, say) -> dict:
    """The same part on the embedded default: a fresh SQLite file (WAL), one
    database-polling worker process of ``slots`` slots, no Redis; everything runs in
    subprocesses with ``DATABASE_URL`` and ``REDIS_URL`` unset, rows read with
    ``sqlite3``."""
    say(
        f"agents on SQLite: {runs} runs x {WAIT_STEPS} steps waiting {wait_s}s, "
        f"1 worker x {slots} slots"
    )
    root = Path(tempfile.mkdtemp(prefix="agentops-bench-agents-sqlite-"))
    try:
        with WaitingModelServer(wait_s) as model:
            figures = _agents_sqlite_in(root, runs, wait_s, slots, model)
            figures["model_requests"] = model.count
            figures["model_requests_received"] = model.received
            return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _agents_sqlite_in(root: Path, runs: int, wait_s: float, slots: int, model) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        {
            "AGENTOPS_VAR_DIR": str(root),
            "AGENTOPS_SQLITE_PATH": str(root / "bench.sqlite3"),
            "AGENTOPS_DEVICE_DIR": str(root / "devices"),
            "AGENTOPS_MEDIA_ROOT": str(root / "artifacts"),
            "AGENTOPS_MODEL": "openai:bench",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "bench",
            "AGENTOPS_WORKER_CONCURRENCY": str(slots),
        }
    )
    manage = [sys.executable, str(MANAGE_PY)]
    opts: dict[str, Any] = {
        "env": env,
        "cwd": settings.BASE_DIR,
        "capture_output": True,
        "text": True,
    }
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], check=True, **opts)
    start = (
        "from runs.engine.control.lifecycle import start_run\n"
        f"for i in range({runs}):\n"
        "    start_run('bench_agent', thread_id=f'agents-{i}', input={}, actor='bench')\n"
    )
    subprocess.run([*manage, "shell", "-v", "0", "-c", start], check=True, **opts)
    probe = root / "probe.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lab.drills.probe", str(probe), "worker", "--mode", "db"],
        env=env,
        cwd=settings.BASE_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    db = sqlite3.connect(root / "bench.sqlite3", timeout=30)
    try:
        done = wait_until(
            lambda: db.execute(
                "SELECT count(*) FROM runs_run WHERE status = 'SUCCEEDED'"
            ).fetchone()[0]
            == runs,
            timeout=max(300, 10 * runs * WAIT_STEPS * wait_s / slots),
            interval=0.2,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60 + wait_s * WAIT_STEPS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    parse = datetime.fromisoformat
    spans = [
        (parse(started), parse(finished))
        for started, finished in db.execute(
            "SELECT started_at, finished_at FROM runs_step WHERE status = 'SUCCEEDED'"
        )
    ]
    retries = db.execute(
        "SELECT coalesce(sum(attempt - 1), 0) FROM runs_step WHERE attempt > 1"
    ).fetchone()[0]
    db.close()
    counts = [json.loads(probe.read_text())] if probe.exists() else []
    return agents_figures(
        spans,
        counts,
        runs=runs,
        wait_s=wait_s,
        workers=1,
        slots=slots,
        completed=bool(done),
        steps_expected=runs * WAIT_STEPS,
        step_retries=retries,
    )
