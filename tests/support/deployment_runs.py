"""Helpers for the tests that drive a deployment: users, runs started and worked, and
reading its database as ``manage.py shell`` would (the tests stay black-box: the reads run in a
process of the deployment's own, never in the test's)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.services import Deployment
from tests.support.waiting import wait_until

WEEK = '{"week": "2026-W48"}'

#: Deployment settings of quick worker and sweeper loops, with leases that a worker
#: starved for seconds on a loaded machine still keeps (it treats its lease as lost after
#: two thirds of it without a renewal): a step finishes in its first attempt, a dead
#: worker is noticed by liveness.
QUICK_LOOPS = {
    "AGENTOPS_LEASE_SECONDS": 10,
    "AGENTOPS_POLL_SECONDS": 0.2,
    "AGENTOPS_SWEEP_SECONDS": 0.5,
    "AGENTOPS_RENOTIFY_SECONDS": 1,
}

#: Deployment settings that register the ``branchy`` test workflows (tests/workflows/branchy.py).
BRANCHY = {"AGENTOPS_EXTRA_WORKFLOW_MODULES": "tests.workflows.branchy"}


def weekly_input(**extra: Any) -> str:
    """The weekly_report input JSON with optional extra keys (``delays``, ``focus``)."""
    return json.dumps({"week": "2026-W48", **extra})


def shell_json(d: Deployment, code: str, *, fresh: bool = False) -> Any:
    """Run ``code`` as ``manage.py shell -c`` runs it and parse what it prints last as
    JSON; the code must end by printing ``json.dumps(...)`` (``json`` is imported for
    it). It runs in the deployment's shell probe (``Deployment.shell``); ``fresh=True``
    runs it in a ``manage.py shell`` process of its own, for code that leaves threads,
    sessions or locks behind for the process's end to clear."""
    code = "import json\n" + code
    if fresh:
        out = d.manage("shell", "-v", "0", "-c", code, check=True, timeout=120).stdout
    else:
        out = d.shell(code)
    return json.loads(out.strip().splitlines()[-1])


def attempt_facts(d: Deployment, run_id: str) -> dict:
    """What the API and the run page's timeline make of the run's attempts:
    ``{"api": {step name: [attempt document, ...]}, "bars": {step name: [drawn outcome,
    ...]}}``, computed in the deployment."""
    return shell_json(
        d,
        f"""
from django.utils import timezone
from runs.api.documents import step_documents
from runs.console.charts import run_timeline
from runs.models import Run, Step
run = Run.objects.get(pk={run_id!r})
steps = list(Step.objects.filter(run=run).order_by("seq"))
timeline = run_timeline(run, timezone.now())
print(json.dumps({{
    "api": {{s["name"]: s["attempts"] for s in step_documents(run, steps)}},
    "bars": {{row["label"].split(". ", 1)[1]: [b["outcome"] for b in row["bars"]]
              for row in timeline.rows}},
}}, default=str))
""",
    )


def make_user(
    d: Deployment, username: str, *, approver: bool = False, operator: bool = False
) -> None:
    """Create a plain user; ``approver`` grants ``runs.decide_approval``,
    ``operator`` grants ``runs.operate_run``."""
    shell_json(
        d,
        f"""
from django.contrib.auth.models import Permission, User
u = User.objects.create_user({username!r}, password="pw-{username}")
if {approver!r}:
    u.user_permissions.add(Permission.objects.get(codename="decide_approval"))
if {operator!r}:
    u.user_permissions.add(Permission.objects.get(codename="operate_run"))
print(json.dumps(u.pk))
""",
    )


def status(d: Deployment, run_id: str) -> dict:
    """``runs status RUN --json``, run in the deployment's shell probe."""
    return json.loads(d.call("runs", "status", run_id, "--json"))


def facts(d: Deployment, run_id: str) -> dict:
    """The run's rows as plain data: ``{"run": {...}, "steps": [...], "events": [...],
    "approvals": [...], "takeovers": [...], "artifacts": [...], "operations": [...],
    "checkpoints": [...]}``."""
    return shell_json(
        d,
        f"""
from runs.models import Approval, Takeover
from runs.models import Artifact, Checkpoint, Event, Operation, Run, Step
run = Run.objects.get(pk={run_id!r})
print(json.dumps({{
    "run": {{"status": run.status, "generation": run.generation,
             "workflow_version": run.workflow_version,
             "stuck_since": str(run.stuck_since) if run.stuck_since else None,
             "cancel_reason": run.cancel_reason}},
    "steps": list(Step.objects.filter(run=run).order_by("seq").values(
        "pk", "name", "seq", "status", "generation", "attempt", "owner", "lease_until",
        "error_code", "output")),
    "events": list(Event.objects.filter(run=run).order_by("seq").values(
        "seq", "type", "actor", "payload", "step_id")),
    "approvals": list(Approval.objects.filter(run=run).order_by("pk").values(
        "pk", "status", "question", "evidence", "comment", "decided_by__username")),
    "takeovers": list(Takeover.objects.filter(run=run).order_by("pk").values(
        "pk", "status", "cause", "reason", "failed_at", "suggested_action", "evidence",
        "checkpoints", "done_summary", "resolution", "resolved_by")),
    "artifacts": list(Artifact.objects.filter(run=run).order_by("pk").values(
        "pk", "name", "uri", "checksum", "size", "step__name")),
    "operations": list(Operation.objects.filter(run=run).order_by("pk").values(
        "tool", "idempotency_key", "status", "step__name")),
    "checkpoints": list(Checkpoint.objects.filter(run=run).order_by("pk").values(
        "name", "generation")),
}}, default=str))
""",
    )


def events_of(info: dict, type_: str) -> list[dict]:
    """The events of type ``type_`` from ``facts()``."""
    return [e for e in info["events"] if e["type"] == type_]


def db_rows(d: Deployment, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of one statement straight against the deployment's database, committed
    (a test's ``UPDATE ... RETURNING`` moves a row as a worker would see it; fast enough
    to poll for a short-lived state; use ``%s`` placeholders)."""
    if d.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(d.env["AGENTOPS_SQLITE_PATH"], timeout=30)
        try:
            with conn:
                return conn.execute(sql.replace("%s", "?"), params).fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(d.database_url) as conn:
        return conn.execute(sql, params).fetchall()


def expire_leases(d: Deployment, run_id: str) -> int:
    """Move the lease of every RUNNING step of the run into the past, as if its worker
    had been gone for a whole lease; returns how many steps. A test that needs a lease
    live for one command and expired for the next does this instead of waiting a lease
    out, which races that command on a loaded machine."""
    key = db_id(d, run_id)
    sql = "UPDATE runs_step SET lease_until = %s WHERE run_id = %s AND status = 'RUNNING'"
    if d.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(d.env["AGENTOPS_SQLITE_PATH"], timeout=30)
        try:
            with conn:
                return conn.execute(sql.replace("%s", "?"), ("2000-01-01 00:00:00", key)).rowcount
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(d.database_url) as conn:
        return conn.execute(sql, ("2000-01-01T00:00:00Z", key)).rowcount


def run_status(d: Deployment, run_id: str) -> str | None:
    """The run's status straight from its row (or None): what a wait polls, where a
    ``runs status`` process per poll would cost a second of CPU."""
    key = db_id(d, run_id)
    rows = db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (key,))
    return rows[0][0] if rows else None


def run_ended(d: Deployment, run_id: str) -> str | None:
    """The run's status if it is a final one (SUCCEEDED, FAILED, CANCELLED), else None:
    what a wait for the run's end polls."""
    status = run_status(d, run_id)
    return status if status in ("SUCCEEDED", "FAILED", "CANCELLED") else None


def branch_rows(d: Deployment, run_id: str) -> list[tuple]:
    """``(position, status, attempt)`` of the run's branch rows in position order."""
    return db_rows(
        d,
        "SELECT position, status, attempt FROM runs_step WHERE run_id = %s "
        "AND branch_of_id IS NOT NULL ORDER BY position",
        (db_id(d, run_id),),
    )


def logged_effects(path: Path) -> list[str]:
    """The words a fake outside system appended to its log file ``path``, one per effect
    made (none if it wrote nothing yet)."""
    return path.read_text().split() if path.exists() else []


def step_status(d: Deployment, run_id: str, name: str) -> str | None:
    """The newest step row called ``name`` of the run, its status (or None)."""
    key = db_id(d, run_id)
    rows = db_rows(
        d,
        "SELECT status FROM runs_step WHERE run_id = %s AND name = %s ORDER BY seq DESC LIMIT 1",
        (key, name),
    )
    return rows[0][0] if rows else None


def db_id(d: Deployment, run_id: str) -> str:
    """The run id as the deployment's database stores it: SQLite keeps UUIDs as 32 hex
    digits, PostgreSQL as uuid."""
    return run_id.replace("-", "") if d.backend == "sqlite" else run_id


def events(d: Deployment, run_id: str, type_: str) -> list[dict]:
    """The run's events of type ``type_`` straight from the database, oldest first, as
    ``{"payload", "actor"}``."""
    rows = db_rows(
        d,
        "SELECT payload, actor FROM runs_event WHERE run_id = %s AND type = %s ORDER BY seq",
        (db_id(d, run_id), type_),
    )
    return [{"payload": p if isinstance(p, dict) else json.loads(p), "actor": a} for p, a in rows]


def start(d: Deployment, workflow: str, input: str, *flags) -> str:
    """``runs start`` on a thread of its own, in the deployment's shell probe; returns
    the run id."""
    thread = f"t-{time.monotonic_ns()}"
    return d.call("runs", "start", workflow, "--thread", thread, "--input", input, *flags).strip()


def start_with_command(d: Deployment, workflow: str, thread: str, input: str, *flags) -> str:
    """``manage.py runs start WORKFLOW --thread THREAD --input INPUT [FLAGS]`` in a
    process of its own, as an operator types it; returns the run id it prints. Fails the
    test (``subprocess.CalledProcessError``) when the command exits non-zero."""
    return d.manage(
        "runs", "start", workflow, "--thread", thread, "--input", input, *flags, check=True
    ).stdout.strip()


def start_run_in_shell(d: Deployment, workflow: str, thread: str, **input: Any) -> str:
    """``start_run(workflow, thread_id=thread, input=input, actor="test")`` in the
    deployment's shell probe, bypassing the command line; returns the run id."""
    return shell_json(
        d,
        f"""
from runs.engine.control.lifecycle import start_run
print(json.dumps(str(start_run({workflow!r}, thread_id={thread!r}, input={input!r},
    actor="test").pk)))
""",
    )


def start_on_thread(d: Deployment, workflow: str, thread: str, data: dict, *extra) -> str:
    """``runs start`` on the named ``thread`` with ``data`` as its input, in the
    deployment's shell probe (``Deployment.call``: the command line itself has tests of
    its own); returns the run id."""
    out = d.call("runs", "start", workflow, "--thread", thread, "--input", json.dumps(data), *extra)
    return out.strip().splitlines()[-1]


def run_context(d: Deployment, run_id: str, step: str | None = None) -> dict:
    """``runs context RUN [--step NAME] --json``: what the model sees at that step."""
    args = ["runs", "context", run_id, "--json"]
    if step:
        args += ["--step", step]
    return d.manage_json(*args)


def burst_until(d: Deployment, what: str, check: Callable[[], Any]) -> None:
    """Run ``worker --burst`` until ``check()`` holds (a burst may start before the dead
    worker's lease expired and find nothing to do); fails the test naming ``what``."""

    def once():
        if check():
            return True
        d.manage("worker", "--burst", check=True, timeout=120)
        return check()

    wait_until(once, what=what)


def approval_id(d: Deployment, run_id: str) -> int:
    """The id of the run's PENDING approval, read from the database."""
    rows = db_rows(
        d,
        "SELECT id FROM approvals_approval WHERE run_id = %s AND status = 'PENDING'",
        (db_id(d, run_id),),
    )
    return rows[0][0]


def burst_until_status(d: Deployment, run_id: str, *states: str) -> None:
    """Run ``worker --burst`` until the run is in one of ``states``."""
    burst_until(d, "/".join(states), lambda: run_status(d, run_id) in states)
