"""``manage.py bench``: the engine side by side with raw RQ and raw PostgreSQL, recovery
after SIGKILL, and console page times on a large database.

Every part runs in a scratch database on the configured PostgreSQL server and a
scratch Redis database (``lab.drills.sandbox``). Nothing here asserts on time.
"""

import json
import math
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models import NOT_PROVIDED

from lab.drills import raw
from lab.drills.base import owner_pid
from lab.drills.bench_agents import bench_agents, bench_agents_sqlite
from lab.drills.bench_branches import DEFAULT_BRANCHES, BranchesShape, bench_branches
from lab.drills.bench_floor import bench_agents_floor
from lab.drills.sandbox import MANAGE_PY, Sandbox, wait_until
from lab.workflows.synthetic import BENCH_STEPS
from runs.engine.control.lifecycle import start_run
from runs.engine.state.clock import db_now
from runs.models import Event, Run, Step, Thread
from runs.states import RUN_TERMINAL, RunStatus, StepStatus


class AgentsShape(NamedTuple):
    """The agents part: ``runs`` of 3 steps, each waiting ``wait_s`` seconds on the
    model, drained by ``workers`` processes of ``slots`` execution slots."""

    runs: int = 400
    wait_s: float = 1.0
    workers: int = 2
    slots: int = 200
    #: The SQLite variant (``agents_sqlite``): one process of this many slots, at most
    #: 200 runs.
    sqlite_slots: int = 50


DEFAULT_AGENTS = AgentsShape()


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile of ``values`` (``None`` when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def machine() -> dict:
    """What the figures came from: CPU, cores, memory, OS, Python, PostgreSQL, Redis."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    with connection.cursor() as cur:
        cur.execute("SHOW server_version")
        pg = cur.fetchone()[0]
        cur.execute("SHOW synchronous_commit")
        sync = cur.fetchone()[0]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "os": platform.platform(),
        "python": platform.python_version(),
        "postgresql": pg,
        "synchronous_commit": sync,
        "load_avg_at_start": os.getloadavg(),
    }


# -- engine ---------------------------------------------------------------------------


def bench_engine(box: Sandbox, steps: int, workers: int, say) -> dict:
    """No-op ``bench_noop`` runs (``BENCH_STEPS`` steps each) enqueued up front, then
    drained by ``workers`` RQ worker processes that count their database work."""
    runs = max(1, math.ceil(steps / BENCH_STEPS))
    say(f"engine: {runs} runs x {BENCH_STEPS} no-op steps, {workers} RQ workers")
    for i in range(runs):
        start_run("bench_noop", thread_id=f"bench-{workers}-{i}", input={}, actor="bench")
    probes = [box.root / f"probe-{workers}-{i}.json" for i in range(workers)]
    for probe in probes:
        box.start_worker(probe_file=probe)
    total = runs * BENCH_STEPS
    done = wait_until(
        lambda: Step.objects.filter(status=StepStatus.SUCCEEDED).count() >= total
        and Run.objects.filter(status=RunStatus.SUCCEEDED).count() == runs,
        timeout=max(120, total / 20),
        interval=0.5,
    )
    box.stop_workers()
    rows = list(
        Step.objects.filter(status=StepStatus.SUCCEEDED).values_list(
            "seq", "created_at", "started_at", "finished_at", "owner"
        )
    )
    counts = [json.loads(p.read_text()) for p in probes if p.exists()]
    return engine_figures(rows, counts, runs=runs, workers=workers, completed=bool(done))


def steady_rate(items: list[tuple[str, datetime, datetime]]) -> dict:
    """Throughput once every worker is working: ``items`` are ``(worker, started,
    ended)``; the window runs from the latest of the workers' first starts to the last
    end, and counts the items that ended in it. Returns ``{"per_s", "window_s",
    "items"}`` (``per_s`` ``None`` for an empty window). The same rule for the engine
    and raw RQ, so neither is charged for its workers starting at different times."""
    firsts: dict[str, datetime] = {}
    for worker, started, _ in items:
        if worker not in firsts or started < firsts[worker]:
            firsts[worker] = started
    if not firsts:
        return {"per_s": None, "window_s": 0.0, "items": 0}
    start = max(firsts.values())
    end = max(ended for _, _, ended in items)
    inside = sum(1 for _, _, ended in items if ended >= start)
    window = (end - start).total_seconds()
    return {
        "per_s": round(inside / window, 1) if window > 0 else None,
        "window_s": round(window, 3),
        "items": inside,
    }


def engine_figures(rows: list[tuple], counts: list[dict], **about) -> dict:
    """Throughput, latency and per-step database work from the succeeded steps' ``(seq,
    created_at, started_at, finished_at, owner)`` rows and the workers' probe counts."""
    first = min(r[2] for r in rows)
    last = max(r[3] for r in rows)
    elapsed = (last - first).total_seconds()
    chained = [(r[3] - r[1]).total_seconds() for r in rows if r[0] > 1]
    initial = [(r[3] - r[1]).total_seconds() for r in rows if r[0] == 1]
    executed = sum(c["steps"] for c in counts) or len(rows)
    total_of = lambda key: sum(c[key] for c in counts)  # noqa: E731
    return {
        **about,
        "steps": len(rows),
        "elapsed_s": round(elapsed, 3),
        "steps_per_s": round(len(rows) / elapsed, 1) if elapsed > 0 else None,
        "steady": steady_rate([(r[4], r[2], r[3]) for r in rows]),
        "latency_ms": {
            "p50": _ms(percentile(chained, 50)),
            "p95": _ms(percentile(chained, 95)),
            "p99": _ms(percentile(chained, 99)),
        },
        "first_step_latency_ms": {
            "p50": _ms(percentile(initial, 50)),
            "p99": _ms(percentile(initial, 99)),
        },
        "db_per_step": {
            "round_trips": round(total_of("round_trips") / executed, 2),
            "statements": round(total_of("statements") / executed, 2),
            "transactions": round(total_of("transactions") / executed, 2),
            "explicit_transactions": round(total_of("explicit_commits") / executed, 2),
        }
        if counts
        else None,
        "cpu_ms_per_step": (
            round(1000 * total_of("cpu_s_working") / executed, 3)
            if counts and all("cpu_s_working" in c for c in counts)
            else None
        ),
        "probed_workers": len(counts),
        "peak_worker_rss_mb": (
            round(max(c["max_rss_kb"] for c in counts) / 1024, 1) if counts else None
        ),
        "notes": "latency = step row created (dispatched by the predecessor's commit) to its "
        "commit, steps 2..N of each run; first steps wait in the up-front backlog "
        "(first_step_latency_ms). DB counts include each worker's start-up recovery, "
        "registration, sweeps and liveness checks. cpu_ms_per_step: the workers' CPU (user + "
        "system) from each one's first step to its exit, divided by the steps.",
    }


def bench_sqlite(steps: int, workers: int, say) -> dict:
    """The embedded default: the same no-op runs on a fresh SQLite file (WAL) drained by
    ``workers`` database-polling workers, no Redis. Everything runs in subprocesses with
    ``DATABASE_URL`` and ``REDIS_URL`` unset; rows are read with ``sqlite3``."""
    runs = max(1, math.ceil(steps / BENCH_STEPS))
    say(f"embedded SQLite: {runs} runs x {BENCH_STEPS} no-op steps, {workers} polling workers")
    root = Path(tempfile.mkdtemp(prefix="agentops-bench-sqlite-"))
    try:
        return _bench_sqlite_in(root, runs, workers)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _bench_sqlite_in(root: Path, runs: int, workers: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        {
            "AGENTOPS_VAR_DIR": str(root),
            "AGENTOPS_SQLITE_PATH": str(root / "bench.sqlite3"),
            "AGENTOPS_DEVICE_DIR": str(root / "devices"),
            "AGENTOPS_MEDIA_ROOT": str(root / "artifacts"),
        }
    )
    manage = [sys.executable, str(MANAGE_PY)]
    run_opts: dict[str, Any] = {
        "env": env,
        "cwd": settings.BASE_DIR,
        "capture_output": True,
        "text": True,
    }
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], check=True, **run_opts)
    start = (
        "from runs.engine.control.lifecycle import start_run\n"
        f"for i in range({runs}):\n"
        "    start_run('bench_noop', thread_id=f'bench-{i}', input={}, actor='bench')\n"
    )
    subprocess.run([*manage, "shell", "-v", "0", "-c", start], check=True, **run_opts)
    probes = [root / f"probe-{i}.json" for i in range(workers)]
    total = runs * BENCH_STEPS
    procs: list[subprocess.Popen] = []
    db = sqlite3.connect(root / "bench.sqlite3", timeout=30)
    try:
        for probe in probes:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "lab.drills.probe", str(probe), "worker"]
                    + ["--mode", "db"],
                    env=env,
                    cwd=settings.BASE_DIR,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        done = wait_until(
            lambda: db.execute(
                "SELECT count(*) FROM runs_step WHERE status = 'SUCCEEDED'"
            ).fetchone()[0]
            >= total,
            timeout=max(120, total / 10),
            interval=0.5,
        )
    finally:
        # SIGTERM: each worker finishes its step and its probe writes the counts.
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    parse = datetime.fromisoformat
    rows = [
        (seq, parse(created), parse(started), parse(finished), owner)
        for seq, created, started, finished, owner in db.execute(
            "SELECT seq, created_at, started_at, finished_at, owner FROM runs_step "
            "WHERE status = 'SUCCEEDED'"
        )
    ]
    db.close()
    counts = [json.loads(p.read_text()) for p in probes if p.exists()]
    return engine_figures(rows, counts, runs=runs, workers=workers, completed=bool(done))


# -- raw RQ ---------------------------------------------------------------------------


def bench_raw_rq(box: Sandbox, jobs: int, workers: int, say) -> dict:
    """``jobs`` no-op jobs through the scratch Redis, ``workers`` burst SimpleWorkers."""
    from rq import Queue
    from rq.job import Job

    say(f"raw RQ: {jobs} no-op jobs, {workers} SimpleWorker processes")
    redis = box.redis()
    queue = Queue("rawbench", connection=redis)
    ids = []
    for start in range(0, jobs, 1000):
        batch = [
            Queue.prepare_data("lab.drills.raw.noop", result_ttl=3600)
            for _ in range(min(1000, jobs - start))
        ]
        ids += [j.id for j in queue.enqueue_many(batch)]
    procs = [
        box.popen(
            [
                sys.executable,
                "-m",
                "rq.cli",
                "worker",
                "--burst",
                "--quiet",
                "-w",
                "rq.worker.SimpleWorker",
                "--url",
                box.redis_url,
                "--logging_level",
                "WARNING",
                "rawbench",
            ],
            label="rqworker",
        )
        for _ in range(workers)
    ]
    for proc in procs:
        proc.wait(timeout=max(300, jobs / 20))
    done: list[tuple[str, datetime, datetime]] = []
    for start in range(0, len(ids), 1000):
        for job in Job.fetch_many(ids[start : start + 1000], connection=redis):
            if job is not None and job.started_at and job.ended_at:
                done.append((job.worker_name or "", job.started_at, job.ended_at))
    elapsed = (
        (max(e for _, _, e in done) - min(s for _, s, _ in done)).total_seconds()
        if done
        else float("nan")
    )
    return {
        "jobs": len(done),
        "workers": workers,
        "elapsed_s": round(elapsed, 3),
        "jobs_per_s": round(len(done) / elapsed, 1) if done else None,
        "steady": steady_rate(done),
        "worker_class": "rq.worker.SimpleWorker",
    }


# -- raw PostgreSQL -------------------------------------------------------------------


def bench_raw_postgres(box: Sandbox, workers: int, seconds: float, say) -> dict:
    """Single-row UPDATE transactions (autocommit, server commit settings) from
    ``workers`` processes, each on its own row, for ``seconds``."""
    say(f"raw PostgreSQL: single-row UPDATE transactions from {workers} connections, {seconds}s")
    with connection.cursor() as cur:
        cur.execute("CREATE TABLE rawbench (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
        cur.execute("INSERT INTO rawbench (id) SELECT generate_series(1, %s)", [workers])
    connection.close()
    start_at = time.time() + 1.5
    import multiprocessing

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        counts = list(
            pool.map(
                raw.pg_writer,
                [box.database_url] * workers,
                range(1, workers + 1),
                [start_at] * workers,
                [seconds] * workers,
            )
        )
    total = sum(counts)
    return {
        "connections": workers,
        "seconds": seconds,
        "transactions": total,
        "tx_per_s": round(total / seconds, 1),
    }


# -- recovery -------------------------------------------------------------------------


def _hold_runs(box: Sandbox, holders: int, tag: str):
    """Start ``holders`` ``bench_hold`` runs and one worker per run, wait until each step
    is held (attempt 1), then start one rescuer worker. Returns the rescuer, or ``None``
    when the holders did not claim in time."""
    for i in range(holders):
        start_run("bench_hold", thread_id=f"{tag}-{i}", input={}, actor="bench")
    for _ in range(holders):
        box.start_worker()
    held = wait_until(
        lambda: Step.objects.filter(status=StepStatus.RUNNING, attempt=1).count() == holders,
        timeout=120,
        interval=0.2,
    )
    if not held:
        return None
    rescuer = box.start_worker()
    wait_until(lambda: rescuer.poll() is None and "mode=rq" in box.log(rescuer), timeout=60)
    return rescuer


def _hit_holders(box: Sandbox, signum: int, stagger: float) -> dict[int, tuple]:
    """Send ``signum`` to each holder, ``stagger`` seconds apart; returns ``{step_id:
    (signalled_at, lease_until at that moment)}`` on the database clock."""
    by_pid = {p.pid: p for p in box.workers}
    hit = {}
    for step in Step.objects.filter(status=StepStatus.RUNNING).order_by("pk"):
        holder = by_pid.get(owner_pid(step.owner) or 0)
        if holder is None:
            continue  # held by no worker of this sandbox: nothing to signal
        box.signal(holder, signum)
        # Read after the signal: a stopped holder renews no more.
        lease = Step.objects.filter(pk=step.pk).values_list("lease_until", flat=True).first()
        hit[step.pk] = (db_now(), lease)
        time.sleep(stagger)
    return hit


def _recovered(hit: dict[int, tuple], timeout: float) -> list[Step]:
    wait_until(
        lambda: Step.objects.filter(pk__in=hit, status=StepStatus.SUCCEEDED).count() == len(hit),
        timeout=timeout,
        interval=0.1,
    )
    return list(Step.objects.filter(pk__in=hit, status=StepStatus.SUCCEEDED))


def _how(step_ids) -> dict[str, int]:
    """How the held steps were handed over: counts of ``lease.owner_dead`` (liveness)
    and ``lease.expired`` (lease) events."""
    kinds = ("lease.owner_dead", "lease.expired")
    return {kind: Event.objects.filter(step_id__in=step_ids, type=kind).count() for kind in kinds}


def bench_recovery(box: Sandbox, kills: int, stagger: float, say) -> dict:
    """Recovery by liveness: SIGKILL ``kills`` workers, each holding a ``bench_hold``
    step, ``stagger`` seconds apart, with the default lease; time each step from its
    holder's kill to its commit by the rescuer worker."""
    say(f"recovery by liveness: {kills} SIGKILLs (lease {settings.AGENTOPS_LEASE_SECONDS}s)")
    if _hold_runs(box, kills, "kill") is None:
        return {"error": "holders did not claim the steps"}
    killed = _hit_holders(box, signal.SIGKILL, stagger)
    done = _recovered(killed, timeout=settings.AGENTOPS_LEASE_SECONDS * 3 + 60)
    times = [(s.finished_at - killed[s.pk][0]).total_seconds() for s in done]
    box.stop_workers()
    p50 = percentile(times, 50)
    return {
        "kills": kills,
        "recovered": len(times),
        "lease_s": settings.AGENTOPS_LEASE_SECONDS,
        "liveness_s": settings.AGENTOPS_LIVENESS_SECONDS,
        "handed_over_by": _how(killed),
        "p50_s": round(p50, 3) if p50 is not None else None,
        "max_s": round(max(times), 3) if times else None,
        "samples_s": [round(t, 3) for t in sorted(times)],
    }


def bench_lease_fallback(box: Sandbox, stops: int, say) -> dict:
    """The fallback for a hung worker: SIGSTOP ``stops`` holders (they keep their
    database sessions, so their liveness locks stay held) and time each step from the
    stop to its commit by the rescuer, and from its lease's end to that commit."""
    say(f"lease fallback: {stops} SIGSTOPs (lease {settings.AGENTOPS_LEASE_SECONDS}s)")
    if _hold_runs(box, stops, "stop") is None:
        return {"error": "holders did not claim the steps"}
    stopped = _hit_holders(box, signal.SIGSTOP, 0.5)
    done = _recovered(stopped, timeout=settings.AGENTOPS_LEASE_SECONDS * 3 + 60)
    since_stop = [(s.finished_at - stopped[s.pk][0]).total_seconds() for s in done]
    after_expiry = [
        (s.finished_at - stopped[s.pk][1]).total_seconds() for s in done if stopped[s.pk][1]
    ]
    box.stop_workers()
    return {
        "stops": stops,
        "recovered": len(done),
        "lease_s": settings.AGENTOPS_LEASE_SECONDS,
        "handed_over_by": _how(stopped),
        "stop_to_commit_max_s": round(max(since_stop), 3) if since_stop else None,
        "lease_end_to_commit_max_s": round(max(after_expiry), 3) if after_expiry else None,
        "samples_s": [round(t, 3) for t in sorted(since_stop)],
    }


# -- console --------------------------------------------------------------------------


def _insert_select(model, source_sql: str, overrides: dict[str, str], params=()) -> int:
    """``INSERT INTO <model table> SELECT ...`` over ``source_sql``: each concrete column
    gets its SQL expression from ``overrides`` or the model's Python default (columns
    with only a database default are left to it). Returns the rows inserted."""
    template = model()
    columns, exprs, values = [], [], []
    for field in model._meta.concrete_fields:
        column = field.column
        if column in overrides:
            columns.append(column)
            exprs.append(overrides[column])
            continue
        if field.primary_key or field.db_default is not NOT_PROVIDED and not field.has_default():
            continue
        columns.append(column)
        exprs.append("%s")
        values.append(field.get_db_prep_save(getattr(template, field.attname), connection))
    sql = (
        f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) "
        f"SELECT {', '.join(exprs)} {source_sql}"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [*values, *params])
        return cur.rowcount


def seed_console(runs: int, events_per_run: int, say, *, open_permille: int = 30) -> dict:
    """Bulk-insert ``runs`` runs over 1,000 threads (``open_permille`` per mille of them
    not finished), 3 steps and ``events_per_run`` events each,
    server-side (INSERT ... SELECT over generate_series), one run every 30 s back in time
    (100,000 runs span 35 days)."""
    say(f"console: seeding {runs:,} runs and {runs * events_per_run:,} events")
    t0 = time.monotonic()
    _insert_select(Thread, "FROM generate_series(1, 1000) g", {"thread_id": "'seed-' || g"})
    # By default 97% finished (90 succeeded, 5 failed, 2 cancelled), 3% open (running,
    # paused, waiting for approval): what a deployment that has run for a while looks like.
    done = 1000 - open_permille
    statuses = (
        f"CASE WHEN mod(g, 1000) < {done - 70} THEN 'SUCCEEDED' "
        f"WHEN mod(g, 1000) < {done - 20} THEN 'FAILED' "
        f"WHEN mod(g, 1000) < {done} THEN 'CANCELLED' "
        "ELSE (ARRAY['RUNNING','PAUSED','WAITING_APPROVAL'])[1 + mod(g, 3)] END"
    )
    _insert_select(
        Run,
        "FROM generate_series(1, %s) g",
        {
            "id": "gen_random_uuid()",
            "thread_id": "(SELECT min(id) FROM runs_thread) + mod(g, 1000)",
            "workflow": "'room_temperature'",
            "workflow_version": "1",
            "status": statuses,
            "event_seq": str(events_per_run),
            "created_at": "now() - make_interval(secs => g * 30)",
            "updated_at": "now() - make_interval(secs => g * 30)",
            "last_event_at": "now() - make_interval(secs => g * 30)",
            "goal": "'How warm is the living room? #' || g",
        },
        [runs],
    )
    _insert_select(
        Event,
        "FROM runs_run r CROSS JOIN generate_series(1, %s) s",
        {
            "run_id": "r.id",
            "seq": "s",
            "type": "(ARRAY['run.created','step.scheduled','step.started','step.succeeded',"
            "'checkpoint.saved'])[1 + mod(s, 5)]",
            "payload": "jsonb_build_object('attempt', 1, 's', s)",
            "actor": "'seed'",
            "created_at": "r.created_at + make_interval(secs => s)",
        },
        [events_per_run],
    )
    # Three steps a run; the last one mirrors the run's state.
    last_step = (
        "CASE WHEN s < 3 OR r.status = 'SUCCEEDED' THEN 'SUCCEEDED' "
        "WHEN r.status = 'RUNNING' THEN 'RUNNING' WHEN r.status = 'WAITING_APPROVAL' "
        "THEN 'WAITING' WHEN r.status = 'CANCELLED' THEN 'CANCELLED' ELSE 'FAILED' END"
    )
    _insert_select(
        Step,
        "FROM runs_run r CROSS JOIN generate_series(1, 3) s",
        {
            "run_id": "r.id",
            "name": "(ARRAY['plan','read_temperature','reply'])[s]",
            "seq": "s",
            "status": last_step,
            "attempt": "1",
            "not_before": "r.created_at",
            "created_at": "r.created_at + make_interval(secs => s)",
            "started_at": "r.created_at + make_interval(secs => s)",
            "finished_at": "r.created_at + make_interval(secs => s + 1)",
        },
    )
    with connection.cursor() as cur:
        # As autovacuum would have on a deployment this old (visibility map set).
        cur.execute("VACUUM ANALYZE")
    return {
        "runs": Run.objects.count(),
        "steps": Step.objects.count(),
        "events": Event.objects.count(),
        "seed_s": round(time.monotonic() - t0, 1),
    }


def _console_targets() -> list[tuple[str, str]]:
    """[(label, url)] of the console pages to time: overview, its storage panel (loaded
    by htmx on its own), runs list filtered by status, and the detail page of the newest
    FAILED run."""
    from django.urls import reverse

    # A FAILED run when the seed has one (1 in 20), else the newest run.
    run = (
        Run.objects.filter(status=RunStatus.FAILED).order_by("-created_at", "-pk").first()
        or Run.objects.order_by("-created_at", "-pk").first()
    )
    if run is None:
        raise RuntimeError("no run to time the console pages on: seed the database first")
    long_run = _lengthen(LONG_RUN_EVENTS)
    events = reverse("console:run_events", kwargs={"run_id": long_run.pk})
    return [
        ("overview", reverse("console:overview")),
        ("storage panel (counted once a minute)", reverse("console:overview_storage")),
        ("runs list (status=FAILED)", reverse("console:runs") + "?status=FAILED"),
        ("run detail", reverse("console:run", kwargs={"run_id": run.pk})),
        (
            f"run detail ({LONG_RUN_EVENTS:,} events)",
            reverse("console:run", kwargs={"run_id": long_run.pk}),
        ),
        (
            "its events: one older chunk (load more)",
            f"{events}?before={LONG_RUN_EVENTS // 2}",
        ),
    ]


#: Events of the one long run whose page the console part times.
LONG_RUN_EVENTS = 10_000


def _lengthen(total: int) -> Run:
    """The newest open run (else the newest), its event log padded server-side to
    ``total`` events, as a long loop leaves it (its ``event_seq`` is left as seeded: the
    pages read the events themselves; only the gateway writes a run's state columns)."""
    run = (
        Run.objects.exclude(status__in=RUN_TERMINAL).order_by("-created_at", "-pk").first()
        or Run.objects.order_by("-created_at", "-pk").first()
    )
    assert run is not None
    _insert_select(
        Event,
        "FROM generate_series(%s, %s) s",
        {
            # Literals, not parameters: _insert_select passes its own parameters first.
            "run_id": f"'{run.pk}'::uuid",
            "seq": "s",
            "type": "(ARRAY['step.scheduled','step.started','step.succeeded',"
            "'checkpoint.saved'])[1 + mod(s, 4)]",
            "payload": "jsonb_build_object('attempt', 1, 's', s)",
            "actor": "'seed'",
            "created_at": f"now() - make_interval(secs => {int(total)} - s)",
        },
        [run.event_seq + 1, total],
    )
    return run


def bench_console(runs: int, events_per_run: int, requests: int, say) -> dict:
    """Seed, then time each page ``requests`` times in-process (Django test client: the
    server's own time, no network), as a superuser."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    seeded = seed_console(runs, events_per_run, say)
    user = get_user_model().objects.create_superuser("bench", "bench@example.com", "x")
    if "testserver" not in settings.ALLOWED_HOSTS:
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    client = Client()
    client.force_login(user)
    targets = _console_targets()
    pages = {}
    for label, url in targets:
        times, status = [], None
        for _ in range(requests):
            t0 = time.perf_counter()
            response = client.get(url)
            times.append(time.perf_counter() - t0)
            status = response.status_code
        pages[label] = {
            "url": url,
            "status": status,
            "p50_ms": _ms(percentile(times, 50)),
            "p95_ms": _ms(percentile(times, 95)),
            # The first request pays for cold caches (the storage panel: a full count).
            "max_ms": _ms(max(times)),
        }
    return {**seeded, "requests_per_page": requests, "pages": pages}


# -- the whole benchmark ----------------------------------------------------------------


#: The parts of the benchmark, in the order they run (``--only`` picks some).
PARTS = (
    "engine",
    "engine_1",
    "sqlite",
    "recovery",
    "lease_fallback",
    "console",
    "agents",
    "agents_sqlite",
    "agents_floor",
    "branches",
)


def run_bench(
    *,
    steps: int,
    workers: int,
    kills: int = 5,
    stops: int = 2,
    pg_seconds: float = 5.0,
    console_runs: int = 100_000,
    events_per_run: int = 10,
    console_requests: int = 20,
    agents: AgentsShape = DEFAULT_AGENTS,
    branches: BranchesShape = DEFAULT_BRANCHES,
    only: tuple[str, ...] = PARTS,
    say=print,
) -> dict:
    """Run the parts named in ``only`` (all by default); returns ``{"machine", "engine",
    "raw_rq", "raw_postgres", "engine_1", "sqlite", "recovery", "lease_fallback",
    "console", "agents", "agents_floor", "branches", "ratios"}`` with the parts that ran (see
    docs/drills-and-bench.md); ``agents`` and ``branches`` are the shapes of those parts.
    ``engine`` includes raw RQ and raw PostgreSQL, run right after it in the same
    sandbox so the ratios compare like with like."""
    result: dict = {}
    if "engine" in only:
        with Sandbox("bench") as box:
            result["machine"] = machine()
            result["engine"] = bench_engine(box, steps, workers, say)
            result["raw_rq"] = bench_raw_rq(box, result["engine"]["steps"], workers, say)
            result["raw_postgres"] = (
                bench_raw_postgres(box, workers, pg_seconds, say)
                if pg_seconds > 0
                else {"skipped": "--pg-seconds 0"}
            )
        engine = result["engine"]["steps_per_s"]
        result["ratios"] = {
            "engine_vs_raw_rq": _ratio(engine, result["raw_rq"].get("jobs_per_s")),
            "engine_vs_raw_rq_steady": _ratio(
                result["engine"]["steady"]["per_s"], result["raw_rq"]["steady"]["per_s"]
            ),
            "engine_vs_raw_postgres": _ratio(engine, result["raw_postgres"].get("tx_per_s")),
        }
    if "engine_1" in only:
        with Sandbox("bench1") as box:
            result.setdefault("machine", machine())
            result["engine_1"] = bench_engine(box, min(steps, 1000), 1, say)
    if "sqlite" in only:
        result["sqlite"] = bench_sqlite(min(steps, 1000), workers, say)
    if "recovery" in only:
        if kills > 0:
            with Sandbox("recovery") as box:
                result["recovery"] = bench_recovery(box, kills, stagger=1.5, say=say)
        else:
            result["recovery"] = {"skipped": "--kills 0"}
    if "lease_fallback" in only:
        if stops > 0:
            with Sandbox("fallback") as box:
                result["lease_fallback"] = bench_lease_fallback(box, stops, say=say)
        else:
            result["lease_fallback"] = {"skipped": "--stops 0"}
    if "console" in only:
        if console_runs > 0:
            with Sandbox("console") as box:
                result["console"] = bench_console(
                    console_runs, events_per_run, console_requests, say
                )
        else:
            result["console"] = {"skipped": "--console-runs 0"}
    if "agents" in only:
        if agents.runs > 0:
            result["agents"] = bench_agents(
                agents.runs, agents.wait_s, agents.workers, agents.slots, say
            )
        else:
            result["agents"] = {"skipped": "--agent-runs 0"}
    if "agents_sqlite" in only:
        if agents.runs > 0:
            result["agents_sqlite"] = bench_agents_sqlite(
                min(agents.runs, 200), agents.wait_s, agents.sqlite_slots, say
            )
        else:
            result["agents_sqlite"] = {"skipped": "--agent-runs 0"}
    if "agents_floor" in only:
        if agents.runs > 0:
            result["agents_floor"] = bench_agents_floor(agents.wait_s, agents.slots, say)
        else:
            result["agents_floor"] = {"skipped": "--agent-runs 0"}
    if "branches" in only:
        if branches.items > 0:
            result["branches"] = bench_branches(branches, say)
        else:
            result["branches"] = {"skipped": "--branch-items 0"}
    return result


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _engine_rows(label: str, e: dict) -> list[tuple]:
    lat, db = e["latency_ms"], e.get("db_per_step") or {}
    return [
        (label, f"steps/s ({e['steps']} no-op steps, {e['workers']} workers)", e["steps_per_s"]),
        ("", "steps/s once every worker is working", e["steady"]["per_s"]),
        (
            "",
            "dispatch-to-commit ms p50 / p95 / p99",
            f"{lat['p50']} / {lat['p95']} / {lat['p99']}",
        ),
        (
            "",
            "per step: DB round trips / statements / transactions",
            f"{db.get('round_trips')} / {db.get('statements')} / {db.get('transactions')}",
        ),
        ("", "worker CPU ms per step", e.get("cpu_ms_per_step")),
        ("", "peak worker RSS MB", e["peak_worker_rss_mb"]),
    ]


def _skipped(label: str, part: dict) -> list[tuple]:
    return [(label, "skipped", part["skipped"])] if "skipped" in part else []


def format_table(result: dict) -> str:
    """The human-readable table printed by ``manage.py bench`` (the parts that ran)."""
    rows: list[tuple] = []
    if "engine" in result:
        rq, pg, ratios = result["raw_rq"], result["raw_postgres"], result["ratios"]
        rows += _engine_rows("engine", result["engine"])
        rows.append(("raw RQ", f"no-op jobs/s (SimpleWorker x {rq['workers']})", rq["jobs_per_s"]))
        rows.append(("", "jobs/s once every worker is working", rq["steady"]["per_s"]))
        rows += _skipped("raw Postgres", pg) or [
            (
                "raw Postgres",
                f"single-row UPDATE tx/s ({pg['connections']} connections)",
                pg["tx_per_s"],
            )
        ]
        rows += [
            ("ratios", "engine / raw RQ", ratios["engine_vs_raw_rq"]),
            (
                "",
                "engine / raw RQ, once every worker is working",
                ratios["engine_vs_raw_rq_steady"],
            ),
            ("", "engine / raw PostgreSQL", ratios["engine_vs_raw_postgres"]),
        ]
    if "engine_1" in result:
        rows += _engine_rows("engine, 1 wk", result["engine_1"])
    if "sqlite" in result:
        rows += _engine_rows("SQLite", result["sqlite"])
    if "recovery" in result:
        rec = result["recovery"]
        rows += _skipped("recovery", rec) or [
            (
                "recovery",
                f"SIGKILL to commit s p50 / max ({rec.get('kills')} kills, liveness)",
                f"{rec.get('p50_s')} / {rec.get('max_s')} {rec.get('handed_over_by')}",
            )
        ]
    if "lease_fallback" in result:
        fb = result["lease_fallback"]
        rows += _skipped("lease fallbk", fb) or [
            (
                "lease fallbk",
                f"SIGSTOP to commit s max; lease end to commit ({fb.get('lease_s')} s lease)",
                f"{fb.get('stop_to_commit_max_s')}; {fb.get('lease_end_to_commit_max_s')} "
                f"{fb.get('handed_over_by')}",
            )
        ]
    for key in ("agents", "agents_sqlite"):
        if key not in result:
            continue
        ag = result[key]
        rows += _skipped(key, ag) or [
            (
                key,
                f"steps/s ({ag['runs']} runs x 3 steps waiting {ag['wait_s']} s, "
                f"{ag['workers']} x {ag['slots']} slots)",
                ag["steps_per_s"],
            ),
            ("", "ratio to ideal (min(W x N, runs) / wait)", ag.get("ratio_to_ideal")),
            ("", "average steps in flight", ag.get("avg_steps_in_flight")),
            ("", "peak worker RSS MB", ag.get("peak_worker_rss_mb")),
            ("", "peak PostgreSQL connections", ag.get("peak_pg_connections", "-")),
            ("", "worker CPU ms per step", ag.get("cpu_ms_per_step")),
            ("", "DB round trips per step", ag.get("db_round_trips_per_step")),
            (
                "",
                "model requests answered, read / steps; step retries",
                f"{ag['model_requests']}, {ag.get('model_requests_received')} / "
                f"{ag['steps']}; {ag.get('step_retries')}",
            ),
        ]
    if "agents_floor" in result:
        fl = result["agents_floor"]
        rows += _skipped("agents_floor", fl) or [
            (
                "agents_floor",
                f"client CPU ms / request ({fl['concurrency']} at once)",
                " ".join(f"{k}={v}" for k, v in fl["client_ms_per_request"].items()),
            ),
            ("", "model server CPU ms / request", fl["server_ms_per_request"]),
            (
                "",
                "PG round trip CPU ms: client / backend",
                f"{fl['pg_round_trip_client_ms']} / {fl['pg_round_trip_server_ms']}",
            ),
            (
                "",
                f"floor ms / step ({fl['round_trips']} round trips): SDK / Pydantic AI",
                f"{fl['floor_ms_per_step']} / {fl['floor_ms_per_step_pydantic_ai']}",
            ),
            (
                "",
                f"best steps/s on {fl['cores']} cores: SDK / Pydantic AI",
                f"{fl['best_steps_per_s']} / {fl['best_steps_per_s_pydantic_ai']}",
            ),
        ]
    if "branches" in result:
        br = result["branches"]
        rows += _skipped("branches", br) or [
            (
                "branches",
                f"wall s ({br['items']} branches waiting {br['delay_s']} s, "
                f"{br['workers']} x {br['slots']} slots)",
                br["wall_s"],
            ),
            (
                "",
                "branches/s; ratio to ideal (min(W x N, items) / wait)",
                f"{br['branches_per_s']}; {br['ratio_to_ideal']}",
            ),
            (
                "",
                "last branch claimed s after the fan-out; avg in flight",
                f"{br['claim_spread_s']}; {br['avg_in_flight']}",
            ),
            (
                "",
                "join ms after the last branch: start / run end",
                f"{br['join_start_ms']} / {br['join_end_ms']}",
            ),
            (
                "",
                "most attempts of a branch; recorded calls",
                f"{br['max_attempts']}; {br['recorded_calls']}",
            ),
        ]
    con = result.get("console", {})
    rows += _skipped("console", con)
    if con and "skipped" not in con:
        rows.append(("console", "seeded", f"{con['runs']:,} runs, {con['events']:,} events"))
        for label, page in con["pages"].items():
            rows.append(
                (
                    "",
                    f"{label} ms p50 / p95 / max",
                    f"{page['p50_ms']} / {page['p95_ms']} / {page['max_ms']} "
                    f"(HTTP {page['status']})",
                )
            )
    lines = [f"{'part':<13} {'figure':<54} value"]
    lines += [f"{part:<13} {figure:<54} {value}" for part, figure, value in rows]
    return "\n".join(lines)
