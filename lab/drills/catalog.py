"""The drills. Each runs real ``manage.py worker`` processes in a fresh
``Sandbox``, injects its fault, and checks where the run resumed, how many times each
outside call happened (the simulated systems' own logs) and the business result.
"""

import signal
import threading
import time

from agentops import db_pool
from lab.drills.base import (
    drill,
    events,
    owner_pid,
    running_or_exit,
    steps,
    wait_status,
    wait_terminal,
)
from lab.drills.sandbox import PgCluster, Sandbox, process_state, wait_until
from lab.sim import faults, services
from lab.sim.devices import device_calls
from runs.engine.control.cancel import request_cancel
from runs.engine.control.lifecycle import run_status, start_run
from runs.engine.effects.budget import raise_budget
from runs.engine.execution import dispatch
from runs.models import Operation, Run, Step, WorkerProcess
from runs.states import RUN_TERMINAL, RunStatus, StepStatus

#: Short leases and fast sweeps so a drill takes seconds, not minutes.
DRILL_ENV = {
    "AGENTOPS_LEASE_SECONDS": "3",
    "AGENTOPS_SWEEP_SECONDS": "0.5",
    "AGENTOPS_RENOTIFY_SECONDS": "2",
    "AGENTOPS_POLL_SECONDS": "0.2",
}
ANSWER = "It is 23.5 °C in the living room right now."
QUESTION = {"question": "How warm is the living room?"}


def _answer(run_id) -> str:
    messages = run_status(Run.objects.get(pk=run_id))["messages"]
    replies = [m["content"] for m in messages if m["role"] == "assistant" and m["content"]]
    return replies[-1] if replies else ""


def _expect_workers_alive(r, box: Sandbox, n: int) -> None:
    """Check that all ``n`` workers still run; a dead one is named with its exit code and
    the tail of its log."""
    alive = len(box.live_workers())
    observed = alive if alive == n else f"{alive}; dead: {box.dead_workers()}"
    r.check("workers alive", n, observed, alive == n)


def _start_room(label: str, budget: dict | None = None) -> Run:
    return start_run(
        "room_temperature",
        thread_id=f"drill-{label}-{time.monotonic_ns()}",
        input=QUESTION,
        budget=budget,
        actor="drill",
    )


def _wait_stopped(box: Sandbox, timeout: float = 30, exclude=None):
    """The sandbox worker that suspended itself (an armed ``stop`` fault fired)."""
    return wait_until(
        lambda: next(
            (p for p in box.live_workers() if process_state(p.pid) == "T" and p is not exclude),
            None,
        ),
        timeout,
    )


def _started_by(run_id) -> list[tuple[str, int, str]]:
    """``(step name, attempt, worker)`` of every step.started event, in order."""
    names = {s.pk: s.name for s in Step.objects.filter(run_id=run_id)}
    return [
        (
            names.get(e.step_id, "?") if e.step_id is not None else "?",
            e.payload.get("attempt"),
            e.payload.get("worker"),
        )
        for e in events(run_id, ("step.started",))
    ]


def _status_events_after_terminal(run_id) -> list[str]:
    """Run status-change events recorded after the first terminal one (must be none)."""
    terminal_types = {f"run.{s.lower()}" for s in RUN_TERMINAL}
    seen_terminal, after = False, []
    for e in events(run_id):
        if seen_terminal and e.type.startswith("run.") and e.type != "run.resume_requested":
            after.append(e.type)
        seen_terminal = seen_terminal or e.type in terminal_types
    return after


def _cancel(run: Run) -> None:
    """Cancel as an operator through the cancel flow."""
    request_cancel(run, actor="user:drill", reason="drill: operator cancel")


@drill("kill_after_tool", "worker SIGKILLed after a tool succeeded, before its result was saved")
def kill_after_tool(r):
    with Sandbox("kill", env=DRILL_ENV) as box:
        run = _start_room("kill")
        faults.arm("thermostat.read", "stop", when="after", run_id=run.pk)
        first = box.start_worker()
        frozen = _wait_stopped(box)
        r.check(
            "worker froze right after the thermostat answered",
            "stopped",
            "stopped" if frozen else "not stopped",
            frozen is first,
        )
        calls_at_kill = device_calls(str(run.pk))
        box.signal(first, signal.SIGKILL)
        second = box.start_worker()
        status = wait_status(run.pk, RUN_TERMINAL, 60)
        started = _started_by(run.pk)
        resumed = [name for name, _, worker in started if owner_pid(worker or "") == second.pid]
        by_name = steps(run.pk)
        r.expect("run status", "SUCCEEDED", status)
        r.expect("thermostat reads when killed", 1, calls_at_kill.get("thermostat.read"))
        r.expect("second worker resumed at", "read_temperature", resumed[0] if resumed else None)
        r.expect("plan (done before the kill) attempts", 1, by_name["plan"].attempt)
        r.expect("read_temperature attempts", 2, by_name["read_temperature"].attempt)
        r.expect(
            "thermostat reads in all (read tool: safe to repeat)",
            2,
            device_calls(str(run.pk)).get("thermostat.read"),
        )
        r.expect("model calls charged", 2, Run.objects.get(pk=run.pk).model_calls)
        r.expect("answer", ANSWER, _answer(run.pk))
        r.expect("second worker", "alive", running_or_exit(second))


@drill("duplicate_messages", "the same queue message delivered many times, some mid-step")
def duplicate_messages(r):
    with Sandbox("dup", env=DRILL_ENV) as box:
        faults.arm("thermostat.read", "delay", shots=-1, seconds=1.0)
        runs = [_start_room(f"dup{i}") for i in range(3)]
        ids = [run.pk for run in runs]
        for _ in range(2):
            box.start_worker()
        sent = 0
        stop = threading.Event()

        def duplicate():
            nonlocal sent
            while not stop.is_set():
                pairs = Step.objects.filter(run_id__in=ids).values_list("pk", "run_id")
                for step_id, run_id in pairs:
                    dispatch.notify_now(run_id, step_id)
                    sent += 1
                time.sleep(0.05)

        thread = threading.Thread(target=duplicate, daemon=True)
        thread.start()
        statuses = wait_terminal(ids, 90)
        for _ in range(10):  # late duplicates after the end
            for step_id, run_id in Step.objects.filter(run_id__in=ids).values_list("pk", "run_id"):
                dispatch.notify_now(run_id, step_id)
                sent += 1
        time.sleep(3)
        stop.set()
        thread.join(timeout=10)
        r.check("duplicate notifications sent", "> 100", sent, sent > 100)
        r.expect("runs SUCCEEDED", 3, sum(s == RunStatus.SUCCEEDED for s in statuses.values()))
        attempts = sorted({s.attempt for s in Step.objects.filter(run_id__in=ids)})
        r.expect("attempts per step", [1], attempts)
        started = [len(_started_by(i)) for i in ids]
        r.expect("step.started events per run", [3, 3, 3], started)
        r.expect(
            "thermostat reads per run",
            [1, 1, 1],
            [device_calls(str(i)).get("thermostat.read") for i in ids],
        )
        r.expect("answers", [ANSWER] * 3, [_answer(i) for i in ids])
        _expect_workers_alive(r, box, 2)


@drill(
    "late_message",
    "late writes after a terminal state (success after cancel, failure "
    "after success) and late queue messages",
)
def late_message(r):
    with Sandbox("late", env=DRILL_ENV) as box:
        # Failure after success: the first worker freezes inside the read; another takes
        # over and finishes; the first wakes up and its call fails.
        done = _start_room("late-ok")
        faults.arm("thermostat.read", "stop_then_fail", when="before", run_id=done.pk)
        sleeper = box.start_worker()
        _wait_stopped(box)
        helper = box.start_worker()
        r.expect(
            "run finished by the other worker", "SUCCEEDED", wait_status(done.pk, RUN_TERMINAL, 60)
        )
        box.signal(sleeper, signal.SIGCONT)
        wait_until(lambda: events(done.pk, ("step.commit_rejected",)), 20)
        rejected = events(done.pk, ("step.commit_rejected",))
        r.check(
            "late failure recorded as rejected",
            "step.commit_rejected",
            [e.payload.get("reason") for e in rejected],
            bool(rejected),
        )
        r.expect("status after the late failure", "SUCCEEDED", Run.objects.get(pk=done.pk).status)
        # Success after cancel: freeze inside the read, cancel, wake up, succeed.
        box.signal(helper, signal.SIGSTOP)
        cancelled = _start_room("late-cancel")
        faults.arm("thermostat.read", "stop", when="before", run_id=cancelled.pk)
        frozen = _wait_stopped(box, exclude=helper)
        box.signal(helper, signal.SIGCONT)
        r.check(
            "a worker froze inside the second run's read",
            "stopped",
            "stopped" if frozen else "not stopped",
            frozen is not None,
        )
        _cancel(Run.objects.get(pk=cancelled.pk))
        r.expect(
            "run cancelled while its step ran",
            "CANCELLED",
            wait_status(cancelled.pk, (RunStatus.CANCELLED,), 60),
        )
        box.signal(frozen, signal.SIGCONT)
        wait_until(
            lambda: events(
                cancelled.pk, ("step.commit_rejected", "step.abandoned", "step.cancelled")
            ),
            20,
        )
        late = [
            e.type
            for e in events(
                cancelled.pk, ("step.commit_rejected", "step.abandoned", "step.cancelled")
            )
        ]
        r.check("late success refused", "step.commit_rejected (or abandoned)", late, bool(late))
        r.expect(
            "status after the late success", "CANCELLED", Run.objects.get(pk=cancelled.pk).status
        )
        # Late queue messages for every step of both terminal runs.
        before = {i: len(_started_by(i)) for i in (done.pk, cancelled.pk)}
        for _ in range(5):
            for step_id, run_id in Step.objects.filter(
                run_id__in=[done.pk, cancelled.pk]
            ).values_list("pk", "run_id"):
                dispatch.notify_now(run_id, step_id)
        time.sleep(3)
        after = {i: len(_started_by(i)) for i in (done.pk, cancelled.pk)}
        r.expect("steps started by late messages", 0, sum(after[i] - before[i] for i in after))
        r.expect(
            "status events after a terminal one",
            [[], []],
            [_status_events_after_terminal(done.pk), _status_events_after_terminal(cancelled.pk)],
        )


@drill("redis_flush", "Redis flushed and its connections dropped mid-run")
def redis_flush(r):
    with Sandbox("redis", env=DRILL_ENV) as box:
        faults.arm("thermostat.read", "delay", shots=-1, seconds=0.7)
        ids = [_start_room(f"redis{i}").pk for i in range(4)]
        for _ in range(2):
            box.start_worker()
        wait_until(
            lambda: Step.objects.filter(run_id__in=ids, status=StepStatus.RUNNING).exists(),
            30,
            0.05,
        )
        killed = box.drop_redis_connections()
        time.sleep(1.5)
        killed += box.drop_redis_connections()
        statuses = wait_terminal(ids, 90)
        r.check("Redis clients disconnected", "> 0", killed, killed > 0)
        r.expect("runs SUCCEEDED", 4, sum(s == RunStatus.SUCCEEDED for s in statuses.values()))
        r.expect(
            "thermostat reads per run",
            [1] * 4,
            [device_calls(str(i)).get("thermostat.read") for i in ids],
        )
        r.expect("answers", [ANSWER] * 4, [_answer(i) for i in ids])
        _expect_workers_alive(r, box, 2)


@drill(
    "db_outage",
    "PostgreSQL stopped for a few seconds while workers run (one RQ "
    "worker, one database-polling worker, the sweeper)",
)
def db_outage(r):
    cluster = PgCluster().init()
    try:
        with Sandbox("dbdown", env=DRILL_ENV, server=cluster.server) as box:
            faults.arm("thermostat.read", "delay", shots=-1, seconds=1.0)
            ids = [_start_room(f"db{i}").pk for i in range(3)]
            box.start_worker(mode="rq")
            box.start_worker(mode="db")
            box.start_sweeper()
            # Both workers past start-up (registered, recovery sweep done) and a step
            # running: the outage hits workers at work, not a process still starting.
            wait_until(lambda: WorkerProcess.objects.count() == 2, 60)
            time.sleep(1.5)
            wait_until(
                lambda: Step.objects.filter(run_id__in=ids, status=StepStatus.RUNNING).exists(),
                30,
                0.05,
            )
            from django.db import connection

            finished_before = sum(s in RUN_TERMINAL for s in wait_terminal(ids, 0).values())
            connection.close()
            cluster.stop("fast")
            time.sleep(4)
            cluster.start()
            statuses = wait_terminal(ids, 120)
            reads = [device_calls(str(i)).get("thermostat.read", 0) for i in ids]
            r.check("runs finished before the outage", "< 3", finished_before, finished_before < 3)
            r.expect("runs SUCCEEDED", 3, sum(s == RunStatus.SUCCEEDED for s in statuses.values()))
            r.check(
                "thermostat reads per run (a read lost in the outage is repeated)",
                "1 or 2 each",
                reads,
                all(n in (1, 2) for n in reads),
            )
            r.expect("answers", [ANSWER] * 3, [_answer(i) for i in ids])
            r.expect("processes that died (exit code, log tail)", [], box.dead_workers())
    finally:
        cluster.destroy()


@drill(
    "sigstop_fenced",
    "worker paused past its lease, another takes over, the first "
    "wakes up: write fenced, side effect deduplicated by key",
)
def sigstop_fenced(r):
    with Sandbox("stop", env=DRILL_ENV) as box:
        run = start_run(
            "synthetic_order",
            thread_id="drill-stop",
            input={"sku": "A-1", "amount": 42},
            actor="drill",
        )
        faults.arm("payments.charge", "stop", when="before", run_id=run.pk)
        first = box.start_worker()
        _wait_stopped(box)
        second = box.start_worker()
        r.expect(
            "run finished by the second worker", "SUCCEEDED", wait_status(run.pk, RUN_TERMINAL, 60)
        )
        box.signal(first, signal.SIGCONT)
        wait_until(lambda: events(run.pk, ("step.commit_rejected", "step.abandoned")), 20)
        time.sleep(0.5)
        late = [
            (e.type, e.payload.get("attempt"))
            for e in events(run.pk, ("step.commit_rejected", "step.abandoned"))
        ]
        r.check(
            "stale attempt's commit fenced",
            "step.commit_rejected attempt 1",
            late,
            ("step.commit_rejected", 1) in late,
        )
        charges = [a for a in services.applied_effects() if a["op"] == "charge"]
        requests = device_calls(str(run.pk)).get("payments.charge")
        r.expect("payments.charge requests (both attempts called)", 2, requests)
        r.expect("charges applied by the payments ledger", 1, len(charges))
        op = Operation.objects.get(run_id=run.pk, tool="payments.charge")
        r.expect(
            "ledger key = applied charge key",
            op.idempotency_key,
            charges[0]["key"] if charges else None,
        )
        r.expect("charge step attempts", 2, steps(run.pk)["charge"].attempt)
        r.expect("status after the late write", "SUCCEEDED", Run.objects.get(pk=run.pk).status)
        r.expect("first worker after waking", "alive", running_or_exit(first))
        r.expect("second worker", "alive", running_or_exit(second))


def _terminate_backends(worker_id: str, app_name: str, *, every_session: bool) -> int:
    """``pg_terminate_backend`` sessions of one worker started with ``PGAPPNAME``
    ``app_name``: every one of them (its Django connections, pooled or not, and its
    liveness lock's, each named ``app_name`` or after it), or only its liveness lock's.
    Returns how many were terminated."""
    from django.db import connection

    if every_session:
        match, params = (
            "(application_name = %s OR application_name LIKE %s)",
            [
                app_name,
                f"{app_name} %",
            ],
        )
    else:
        match, params = (
            "application_name = %s",
            [db_pool.application_name("liveness", worker_id, prefix=app_name)],
        )
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            f"WHERE datname = current_database() AND pid <> pg_backend_pid() AND {match}",
            params,
        )
        return cur.fetchone()[0]


@drill(
    "connection_cut",
    "a worker's database sessions are terminated mid-step while its process lives on: "
    "another worker takes over on the liveness signal, the late write is fenced, the "
    "side effect deduplicated by key",
)
def connection_cut(r):
    # (a) Every session of the worker is cut: its late write may also die on its
    # connection. (b) Only its liveness session is cut: it commits on its own connection
    # and that commit must be rejected by the attempt fence.
    _cut_scenario(r, "all sessions", cut_django=True)
    _cut_scenario(r, "lock session only", cut_django=False)


#: The ``PGAPPNAME`` of the worker whose sessions ``connection_cut`` ends.
CUT_APP_NAME = "drill-cut-first"


def _cut_scenario(r, label: str, *, cut_django: bool) -> None:
    # The default 30 s lease: the takeover must come from liveness, not the lease.
    with Sandbox("cut", env={**DRILL_ENV, "AGENTOPS_LEASE_SECONDS": "30"}) as box:
        run = start_run(
            "synthetic_order",
            thread_id="drill-cut",
            input={"sku": "A-1", "amount": 42},
            actor="drill",
        )
        faults.arm("payments.charge", "stop", when="before", run_id=run.pk)
        first = box.start_worker(extra_env={"PGAPPNAME": CUT_APP_NAME})
        _wait_stopped(box)
        second = box.start_worker()
        wait_until(lambda: WorkerProcess.objects.filter(liveness="pg").count() == 2, 30)
        first_id = WorkerProcess.objects.get(pid=first.pid).worker_id
        cut = _terminate_backends(first_id, CUT_APP_NAME, every_session=cut_django)
        if cut_django:
            r.check(f"{label}: sessions terminated", ">= 2 (Django + lock)", cut, cut >= 2)
        else:
            r.expect(f"{label}: sessions terminated", 1, cut)
        r.expect(
            f"{label}: run finished by the second worker",
            "SUCCEEDED",
            wait_status(run.pk, RUN_TERMINAL, 60),
        )
        handed = [(e.type, e.payload.get("attempt")) for e in events(run.pk, LEASE_EVENTS)]
        r.expect(f"{label}: handed over on the liveness signal", [("lease.owner_dead", 1)], handed)
        box.signal(first, signal.SIGCONT)
        late = wait_until(lambda: _late_write(run.pk, first.log_path), 60)
        if cut_django:
            r.check(
                f"{label}: stale attempt's write fenced",
                "step.commit_rejected attempt 1, or refused on its cut connection",
                late,
                bool(late),
            )
        else:
            r.expect(
                f"{label}: stale attempt's commit fenced", "step.commit_rejected attempt 1", late
            )
        charges = [a for a in services.applied_effects() if a["op"] == "charge"]
        requests = device_calls(str(run.pk)).get("payments.charge")
        r.expect(f"{label}: payments.charge requests (both attempts)", 2, requests)
        r.expect(f"{label}: charges applied by the payments ledger", 1, len(charges))
        r.expect(
            f"{label}: step.succeeded of the charge step (one attempt committed)",
            [2],
            [
                e.payload.get("attempt")
                for e in events(run.pk, ("step.succeeded",))
                if e.step_id == steps(run.pk)["charge"].pk
            ],
        )
        r.expect(
            f"{label}: status after the late write", "SUCCEEDED", Run.objects.get(pk=run.pk).status
        )
        r.expect(f"{label}: first worker after waking", "alive", running_or_exit(first))
        r.expect(f"{label}: second worker", "alive", running_or_exit(second))


#: The events that hand a held step over to another worker.
LEASE_EVENTS = ("lease.owner_dead", "lease.expired")


def _late_write(run_id, log_path) -> str:
    """How the woken worker's stale attempt ended: its fenced commit
    (``step.commit_rejected`` of attempt 1), or a database error on its cut connection
    in its log; ``""`` while neither happened."""
    rejected = [
        e for e in events(run_id, ("step.commit_rejected",)) if e.payload.get("attempt") == 1
    ]
    if rejected:
        return "step.commit_rejected attempt 1"
    with open(log_path, encoding="utf-8", errors="replace") as fh:
        log = fh.read()
    if "terminating connection" in log or "connection is closed" in log:
        return "refused: its database connection was cut"
    return ""


@drill("budget_out", "the budget runs out mid-run")
def budget_out(r):
    with Sandbox("budget", env=DRILL_ENV) as box:
        run = _start_room("budget", budget={"model_calls": 1})
        box.start_worker()
        status = wait_status(run.pk, (RunStatus.PAUSED, *RUN_TERMINAL), 60)
        from runs.models import Takeover

        takeover = Takeover.objects.filter(run_id=run.pk).first()
        r.expect("run status", "PAUSED", status)
        r.expect("takeover cause", "budget_exhausted", takeover.cause if takeover else None)
        r.expect("paused at step", "reply", takeover.failed_at if takeover else None)
        r.expect("model calls used (limit 1)", 1, Run.objects.get(pk=run.pk).model_calls)
        r.expect("thermostat reads", 1, device_calls(str(run.pk)).get("thermostat.read"))
        raise_budget(
            Run.objects.get(pk=run.pk),
            actor="user:drill",
            add_model_calls=1,
            reason="drill: budget raised",
        )
        r.expect("after raising the budget", "SUCCEEDED", wait_status(run.pk, RUN_TERMINAL, 60))
        r.expect("thermostat reads in all", 1, device_calls(str(run.pk)).get("thermostat.read"))
        r.expect("answer", ANSWER, _answer(run.pk))


@drill("model_timeout", "a model call times out mid-step")
def model_timeout(r):
    with Sandbox("timeout", env=DRILL_ENV) as box:
        faults.arm("model.complete", "delay", when="before", seconds=6.0)
        run = start_run(
            "synthetic_order",
            thread_id="drill-timeout",
            input={"sku": "T-1", "amount": 5},
            actor="drill",
        )
        box.start_worker()
        status = wait_status(run.pk, RUN_TERMINAL, 60)
        retries = [e.payload.get("error_code") for e in events(run.pk, ("step.retry_scheduled",))]
        r.expect("run status", "SUCCEEDED", status)
        r.expect("plan's first attempt failed with", ["TIMEOUT"], retries)
        r.expect("plan attempts", 2, steps(run.pk)["plan"].attempt)
        r.expect(
            "model calls charged (the timed-out one counts)",
            2,
            Run.objects.get(pk=run.pk).model_calls,
        )
        applied = sorted(a["op"] for a in services.applied_effects())
        r.expect("effects applied once each", ["charge", "reserve", "send"], applied)


def _approver():
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user, _ = get_user_model().objects.get_or_create(username="drill-approver")
    user.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    return get_user_model().objects.get(pk=user.pk)


def _shift_run_clock(run_id, days: int) -> None:
    """Move every stored time of the run ``days`` into the past: to the run, the same
    as the database clock moving forward while nothing ran."""
    from datetime import timedelta

    from django.db.models import F

    from runs.models import Approval, Event

    delta = timedelta(days=days)
    Run.objects.filter(pk=run_id).update(
        created_at=F("created_at") - delta,
        updated_at=F("updated_at") - delta,
        started_at=F("started_at") - delta,
        last_event_at=F("last_event_at") - delta,
    )
    Event.objects.filter(run_id=run_id).update(created_at=F("created_at") - delta)
    Step.objects.filter(run_id=run_id).update(
        created_at=F("created_at") - delta,
        started_at=F("started_at") - delta,
        finished_at=F("finished_at") - delta,
    )
    Approval.objects.filter(run_id=run_id).update(
        created_at=F("created_at") - delta, expires_at=F("expires_at") - delta
    )


@drill(
    "approval_wait",
    "approvals wait days (database clock moved forward, no worker), "
    "then one is approved and one has expired",
)
def approval_wait(r):
    from datetime import timedelta

    from django.db.models import F

    from approvals.services import DecisionConflict, decide
    from runs.models import Approval

    with Sandbox("approval", env=DRILL_ENV) as box:
        kept = start_run(
            "weekly_report", thread_id="drill-appr-1", input={"week": "2026-W40"}, actor="drill"
        )
        lapsed = start_run(
            "weekly_report", thread_id="drill-appr-2", input={"week": "2026-W41"}, actor="drill"
        )
        box.start_worker()
        waiting = [
            wait_status(i, (RunStatus.WAITING_APPROVAL, *RUN_TERMINAL), 60)
            for i in (kept.pk, lapsed.pk)
        ]
        r.expect("both runs wait for approval", ["WAITING_APPROVAL"] * 2, waiting)
        box.stop_workers()
        # Both approvals expire 7 days after they were asked; 3 and 10 days pass.
        Approval.objects.filter(run_id__in=[kept.pk, lapsed.pk]).update(
            expires_at=F("created_at") + timedelta(days=7)
        )
        _shift_run_clock(kept.pk, 3)
        _shift_run_clock(lapsed.pk, 10)
        box.start_worker()
        r.expect(
            "expired approval's run took the expiry route",
            "SUCCEEDED",
            wait_status(lapsed.pk, RUN_TERMINAL, 60),
        )
        r.expect("expired approval", "EXPIRED", Approval.objects.get(run_id=lapsed.pk).status)
        r.expect(
            "still waiting after 3 days", "WAITING_APPROVAL", Run.objects.get(pk=kept.pk).status
        )
        approval = Approval.objects.get(run_id=kept.pk)
        r.expect("approval still pending", "PENDING", approval.status)
        user = _approver()
        decide(approval, decision="approve", user=user, comment="drill: fine")
        try:
            decide(approval, decision="reject", user=user, comment="drill: second thoughts")
            second = "accepted"
        except DecisionConflict:
            second = "DecisionConflict"
        r.expect("a different second decision", "DecisionConflict", second)
        r.expect("approved run", "SUCCEEDED", wait_status(kept.pk, RUN_TERMINAL, 60))
        r.expect(
            "publications (approved run, expired run)",
            [1, 0],
            [device_calls(str(i)).get("publisher.publish", 0) for i in (kept.pk, lapsed.pk)],
        )
        decided = [
            len(events(i, ("approval.approved", "approval.rejected", "approval.expired")))
            for i in (kept.pk, lapsed.pk)
        ]
        r.expect("decision events per approval", [1, 1], decided)


@drill("cancel_running", "a user cancels while a step is running")
def cancel_running(r):
    with Sandbox("cancel", env=DRILL_ENV) as box:
        run = start_run(
            "weekly_report",
            thread_id="drill-cancel",
            input={"week": "2026-W42", "delays": {"analyze": 0.5}},
            actor="drill",
        )
        box.start_worker()
        running = wait_until(
            lambda: Step.objects.filter(
                run_id=run.pk, name="analyze", status=StepStatus.RUNNING
            ).exists(),
            60,
        )
        r.check(
            "analyze running when cancelled",
            "RUNNING",
            "RUNNING" if running else "not",
            bool(running),
        )
        request_cancel(Run.objects.get(pk=run.pk), actor="user:drill", reason="drill: stop it")
        r.expect("run status", "CANCELLED", wait_status(run.pk, RUN_TERMINAL, 60))
        by_name = steps(run.pk)
        r.expect("analyze stopped at a safe point", "CANCELLED", by_name["analyze"].status)
        r.expect(
            "steps after analyze", [], [n for n in by_name if n in ("draft_report", "publish")]
        )
        calls = device_calls(str(run.pk))
        r.expect(
            "slot reserved, then released by compensation",
            (1, 1),
            (calls.get("publisher.reserve"), calls.get("publisher.release")),
        )
        r.expect("publications", 0, calls.get("publisher.publish", 0))
        cancel_events = [
            (e.actor, e.payload.get("reason")) for e in events(run.pk, ("run.cancel_requested",))
        ]
        r.expect(
            "cancel recorded with actor and reason",
            [("user:drill", "drill: stop it")],
            cancel_events,
        )


@drill("verify_unknown", "an external system answers unknown to verification")
def verify_unknown(r):
    from runs.engine.effects.unknown_outcomes import resolve_unknown
    from runs.models import Takeover

    with Sandbox("unknown", env=DRILL_ENV) as box:
        run = start_run(
            "dim_lights",
            thread_id="drill-unknown",
            input={"request": "Lower the brightness by 10%"},
            faults={"crash_after_tool": "set_brightness", "lamp_unreadable": True},
            actor="drill",
        )
        first = box.start_worker()
        wait_until(lambda: first.poll() is not None, 60)
        r.expect("worker crashed after the lamp changed", 75, first.poll())
        box.start_worker()
        status = wait_status(run.pk, (RunStatus.PAUSED, *RUN_TERMINAL), 60)
        takeover = Takeover.objects.filter(run_id=run.pk, status=Takeover.Status.OPEN).first()
        r.expect("run status", "PAUSED", status)
        r.expect("takeover cause", "unknown_outcome", takeover.cause if takeover else None)
        r.expect("step status", "UNKNOWN", steps(run.pk)["set_brightness"].status)
        r.expect(
            "lamp sets (no blind retry)", 1, device_calls(str(run.pk)).get("lamp.set_brightness")
        )
        resolve_unknown(
            Run.objects.get(pk=run.pk),
            "set_brightness",
            outcome="done",
            evidence="drill: the lamp shows 70% on its panel",
            actor="user:drill",
            result={"brightness": 70, "previous": 80},
        )
        r.expect("after the operator said done", "SUCCEEDED", wait_status(run.pk, RUN_TERMINAL, 60))
        r.expect("lamp sets in all", 1, device_calls(str(run.pk)).get("lamp.set_brightness"))


@drill("artifact_corrupt", "an artifact is corrupted or missing before a step reads it")
def artifact_corrupt(r):
    from django.core.files.storage import default_storage

    from approvals.services import decide
    from runs.models import Approval, Artifact, Takeover

    with Sandbox("artifact", env=DRILL_ENV) as box:
        corrupt = start_run(
            "weekly_report", thread_id="drill-art-1", input={"week": "2026-W43"}, actor="drill"
        )
        missing = start_run(
            "weekly_report", thread_id="drill-art-2", input={"week": "2026-W44"}, actor="drill"
        )
        box.start_worker()
        for run in (corrupt, missing):
            wait_status(run.pk, (RunStatus.WAITING_APPROVAL, *RUN_TERMINAL), 60)
        report = Artifact.objects.get(run_id=corrupt.pk, name="report.md")
        with open(default_storage.path(report.uri), "ab") as fh:
            fh.write(b"\ninjected line\n")
        gone = Artifact.objects.get(run_id=missing.pk, name="report.md")
        default_storage.delete(gone.uri)
        user = _approver()
        for run in (corrupt, missing):
            decide(
                Approval.objects.get(run_id=run.pk), decision="approve", user=user, comment="drill"
            )
        statuses = [
            wait_status(i, (RunStatus.PAUSED, *RUN_TERMINAL), 60) for i in (corrupt.pk, missing.pk)
        ]
        r.expect("runs paused", ["PAUSED", "PAUSED"], statuses)
        takeovers = [
            Takeover.objects.filter(run_id=i, status=Takeover.Status.OPEN).first()
            for i in (corrupt.pk, missing.pk)
        ]
        r.expect(
            "takeover causes", ["artifact_invalid"] * 2, [t.cause if t else None for t in takeovers]
        )
        r.expect(
            "problems found",
            ["checksum_mismatch", "missing"],
            [(t.evidence or {}).get("problem") if t else None for t in takeovers],
        )
        r.expect(
            "publications",
            [0, 0],
            [device_calls(str(i)).get("publisher.publish", 0) for i in (corrupt.pk, missing.pk)],
        )
