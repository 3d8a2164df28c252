"""``manage.py soak``: mixed workflows under random faults, then invariants.

Runs the demos (room_temperature, dim_lights, weekly_report, book_trip)
and ``synthetic_order`` in a ``Sandbox`` with short leases while, every ``kill_every``
seconds, one fault picked by the seeded RNG hits: SIGKILL of a worker (a new one is
started), SIGSTOP of a worker for 1-6 s (past its 3 s lease or not) then SIGCONT, a Redis
"restart" (scratch db flushed, client connections dropped), or a burst of duplicated
notifications. An approver decides pending approvals as they appear (and tries a
conflicting second decision now and then). After the faults stop, workers drain the
runs, and the invariants are checked from the database and the simulated systems' own
ledgers. The seed replays the same schedule of faults (process timing still varies).
"""

import random
import signal
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.db.models import Count, Exists, Max, Min, OuterRef

from lab.drills.sandbox import Sandbox
from lab.sim import devices, services
from runs.engine.control.lifecycle import ControlError, start_run
from runs.engine.execution import dispatch
from runs.models import Event, Run, Step
from runs.states import RUN_TERMINAL, RunStatus, StepStatus

SOAK_ENV = {
    "AGENTOPS_LEASE_SECONDS": "3",
    "AGENTOPS_SWEEP_SECONDS": "0.5",
    "AGENTOPS_RENOTIFY_SECONDS": "2",
    "AGENTOPS_POLL_SECONDS": "0.2",
}
FAULTS = ("kill", "stop", "redis", "duplicate")
TERMINAL_EVENTS = {f"run.{s.lower()}": s for s in RUN_TERMINAL}
#: Unsafe operations: every request the system gets is applied, so requests per key
#: are applications per key.
UNSAFE_OPS = ("lamp.set_brightness", "mailer.send")


@dataclass
class Invariant:
    """One checked invariant: ``held`` and, when not, up to 10 ``violations``."""

    name: str
    held: bool
    checked: int
    violations: list[str] = field(default_factory=list)


@dataclass
class SoakReport:
    seed: int
    runs: int
    statuses: dict[str, int]
    faults: dict[str, int]
    invariants: list[Invariant]
    workers_started: int
    seconds: float

    @property
    def ok(self) -> bool:
        return all(i.held for i in self.invariants)

    def as_dict(self) -> dict:
        return {
            "seed": self.seed,
            "ok": self.ok,
            "runs": self.runs,
            "statuses": self.statuses,
            "faults": self.faults,
            "workers_started": self.workers_started,
            "seconds": round(self.seconds, 1),
            "invariants": [i.__dict__ for i in self.invariants],
        }


#: The workflows a soak mixes, all registered by runs.workflows.
WORKFLOW_MIX = ["room_temperature", "dim_lights", "weekly_report", "book_trip", "synthetic_order"]


def _input(workflow: str, i: int, rng: random.Random) -> dict:
    if workflow == "room_temperature":
        return {"question": "How warm is the living room?"}
    if workflow == "dim_lights":
        return {"request": f"Set the lamp to {rng.randint(10, 90)}%"}
    if workflow == "weekly_report":
        return {"week": f"soak-{i}", "delays": {"analyze": round(rng.uniform(0, 0.3), 2)}}
    if workflow == "book_trip":
        return {"guest": f"guest-{i}", "card": "declined" if rng.random() < 0.2 else "visa"}
    return {"sku": f"SKU-{i}", "amount": rng.randint(1, 500), "latency_ms": rng.randint(20, 400)}


class Soak:
    """One soak (see the module docstring); ``run()`` returns a ``SoakReport``."""

    def __init__(
        self,
        *,
        runs: int,
        workers: int,
        duration: float,
        kill_every: float,
        seed: int,
        slots: int = 1,
        say=print,
    ):
        self.n_runs, self.n_workers = runs, workers
        #: Execution slots of each worker process.
        self.slots = slots
        self.duration, self.kill_every = duration, kill_every
        self.seed = seed
        self.rng = random.Random(seed)
        self.say = say
        self.fault_counts: Counter[str] = Counter()
        self.run_ids: list = []
        self.stopped: dict = {}  # proc -> monotonic time to SIGCONT
        self.workers_started = 0
        #: RUNNING runs seen without a due or running step (sampled during the soak).
        self.stranded: dict[str, str] = {}

    def run(self) -> SoakReport:
        started = time.monotonic()
        with Sandbox("soak", env=SOAK_ENV) as box:
            self.box = box
            for _ in range(self.n_workers):
                self._start_worker()
            end = started + self.duration
            start_until = started + self.duration * 0.6
            next_fault = started + self.kill_every
            while time.monotonic() < end:
                now = time.monotonic()
                self._start_due_runs(WORKFLOW_MIX, started, start_until, now)
                if self.kill_every and now >= next_fault:
                    self._inject(self.rng.choice(FAULTS))
                    next_fault += self.kill_every
                self._wake_due(now)
                self._decide_approvals()
                self._look_for_stranded()
                time.sleep(0.2)
            self._start_due_runs(WORKFLOW_MIX, started, started, time.monotonic())
            self.say(f"faults stopped after {self.duration:.0f}s; draining")
            for proc in list(self.stopped):
                box.signal(proc, signal.SIGCONT)
            self.stopped.clear()
            while len(box.live_workers()) < self.n_workers:
                self._start_worker()
            drain_until = time.monotonic() + 90
            while time.monotonic() < drain_until and not self._settled():
                self._decide_approvals()
                self._look_for_stranded()
                time.sleep(0.5)
            box.stop_workers(timeout=20)
            self._look_for_stranded()
            invariants = check_invariants(self.run_ids, stranded=self.stranded)
            statuses = Counter(
                Run.objects.filter(pk__in=self.run_ids).values_list("status", flat=True)
            )
        return SoakReport(
            self.seed,
            len(self.run_ids),
            dict(sorted(statuses.items())),
            dict(self.fault_counts),
            invariants,
            self.workers_started,
            time.monotonic() - started,
        )

    # -- the fault schedule ----------------------------------------------------------
    def _start_worker(self):
        self.workers_started += 1
        return self.box.start_worker(extra_env={"AGENTOPS_WORKER_CONCURRENCY": self.slots})

    def _start_due_runs(self, mix, started, start_until, now) -> None:
        span = max(start_until - started, 0.001)
        due = self.n_runs if now >= start_until else int(self.n_runs * (now - started) / span) + 1
        while len(self.run_ids) < min(due, self.n_runs):
            i = len(self.run_ids)
            workflow = mix[i % len(mix)]
            run = start_run(
                workflow,
                thread_id=f"soak-{self.seed}-{i}",
                input=_input(workflow, i, self.rng),
                actor="soak",
            )
            self.run_ids.append(run.pk)

    def _inject(self, fault: str) -> None:
        box = self.box
        running = [p for p in box.live_workers() if p not in self.stopped]
        if fault in ("kill", "stop") and not running:
            fault = "duplicate"
        self.fault_counts[fault] += 1
        if fault == "kill":
            victim = self.rng.choice(running)
            box.signal(victim, signal.SIGKILL)
            victim.wait(timeout=10)
            self._start_worker()
        elif fault == "stop":
            victim = self.rng.choice(running)
            box.signal(victim, signal.SIGSTOP)
            self.stopped[victim] = time.monotonic() + self.rng.uniform(1, 6)
        elif fault == "redis":
            box.drop_redis_connections()
        else:
            open_steps = list(
                Step.objects.filter(run_id__in=self.run_ids)
                .exclude(run__status__in=RUN_TERMINAL)
                .values_list("pk", "run_id")
            )
            for step_id, run_id in self.rng.sample(open_steps, min(20, len(open_steps))):
                for _ in range(3):
                    try:
                        dispatch.notify_now(run_id, step_id)
                    except Exception:  # noqa: BLE001 - Redis just "restarted": skip
                        break

    def _wake_due(self, now: float) -> None:
        for proc, at in list(self.stopped.items()):
            if now >= at:
                self.box.signal(proc, signal.SIGCONT)
                del self.stopped[proc]

    def _decide_approvals(self) -> None:
        from approvals.services import DecisionConflict, decide
        from runs.models import Approval

        pending = list(
            Approval.objects.filter(run_id__in=self.run_ids, status=Approval.Status.PENDING)
        )
        if not pending:
            return
        user = _approver()
        for approval in pending:
            decision = "approve" if self.rng.random() < 0.8 else "reject"
            try:
                decide(approval, decision=decision, user=user, comment="soak")
            except ControlError:
                continue  # the run moved (cancelled, expired): nothing to decide
            if self.rng.random() < 0.3:
                other = "reject" if decision == "approve" else "approve"
                try:
                    decide(approval, decision=other, user=user, comment="soak: second thoughts")
                except DecisionConflict:
                    pass

    def _look_for_stranded(self) -> None:
        for run_id, workflow in stranded_runs(self.run_ids):
            self.stranded.setdefault(str(run_id), workflow)

    def _settled(self) -> bool:
        from runs.models import Takeover

        open_runs = Run.objects.filter(pk__in=self.run_ids).exclude(status__in=RUN_TERMINAL)
        for run_id, status in open_runs.values_list("pk", "status"):
            if status != RunStatus.PAUSED:
                return False
            if not Takeover.objects.filter(run_id=run_id, status=Takeover.Status.OPEN).exists():
                return False
        return True


def _approver():
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user, created = get_user_model().objects.get_or_create(username="soak-approver")
    if created:
        user.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    return get_user_model().objects.get(pk=user.pk)


# -- invariants -----------------------------------------------------------------------


def _inv(name: str, checked: int, violations: list[str]) -> Invariant:
    return Invariant(name, not violations, checked, violations[:10])


def stranded_runs(run_ids: list) -> list[tuple]:
    """``[(run id, workflow)]`` of the RUNNING runs among ``run_ids`` with no PENDING or
    RUNNING step in their generation: nothing would ever move them. One statement, so
    it reads one snapshot (a run finishing meanwhile is not caught half-way)."""
    has_step = Step.objects.filter(
        run_id=OuterRef("pk"),
        generation=OuterRef("generation"),
        status__in=[StepStatus.PENDING, StepStatus.RUNNING],
    )
    return list(
        Run.objects.filter(pk__in=run_ids, status=RunStatus.RUNNING)
        .exclude(Exists(has_step))
        .values_list("pk", "workflow")
    )


def check_invariants(run_ids: list, *, stranded: dict[str, str] | None = None) -> list[Invariant]:
    """The soak's invariants over ``run_ids`` (see docs/drills-and-bench.md);
    ``stranded``: ``{run id: workflow}`` of RUNNING runs seen without a due or running
    step while the soak ran (``stranded_runs``), added to those found now."""
    from runs.models import Approval, Takeover

    runs = {r.pk: r for r in Run.objects.filter(pk__in=run_ids)}
    out = []

    seen = dict(stranded or {})
    seen.update((str(run_id), workflow) for run_id, workflow in stranded_runs(run_ids))
    out.append(
        _inv(
            "a RUNNING run has a due or running step",
            len(runs),
            [
                f"{workflow} {run_id} was RUNNING with no step to run"
                for run_id, workflow in seen.items()
            ],
        )
    )

    bad = []
    open_takeovers = dict(
        Takeover.objects.filter(run_id__in=run_ids, status=Takeover.Status.OPEN).values_list(
            "run_id", "cause"
        )
    )
    for run in runs.values():
        if run.status in RUN_TERMINAL:
            continue
        if run.status != RunStatus.PAUSED or not open_takeovers.get(run.pk):
            bad.append(
                f"{run.workflow} {run.pk} is {run.status} "
                f"(takeover: {open_takeovers.get(run.pk) or 'none'})"
            )
    out.append(
        _inv("every run terminal, or PAUSED with a takeover naming its cause", len(runs), bad)
    )

    bad = []
    applied = Counter((a["system"], a["op"], a["key"]) for a in services.applied_effects())
    published = Counter(
        item["key"] for item in devices.publisher.snapshot()["state"].get("published", [])
    )
    unsafe = Counter(
        (c["op"], c["key"])
        for d in devices.registered_devices()
        for c in d.snapshot()["calls"]
        if c["op"] in UNSAFE_OPS and c["key"]
    )
    for (system, op, key), n in applied.items():
        if n > 1:
            bad.append(f"{system}.{op} applied {n}x for key {key}")
    for key, n in published.items():
        if n > 1:
            bad.append(f"publisher.publish applied {n}x for key {key}")
    for (op, key), n in unsafe.items():
        if n > 1 and op != "mailer.send":  # mailer sends are counted in ``applied``
            bad.append(f"{op} requested (= applied) {n}x for key {key}")
    checked = len(applied) + len(published) + len(unsafe)
    by_run: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for (system, op, key), n in applied.items():
        by_run[key.split(":")[0]][f"{system}.{op}"] += n
    for key, n in published.items():
        by_run[key.split(":")[0]]["publisher.publish"] += n
    for (op, key), n in unsafe.items():
        if op == "lamp.set_brightness":
            by_run[key.split(":")[0]][op] += n
    for run in runs.values():
        if run.status != RunStatus.SUCCEEDED:
            continue
        effects = by_run.get(str(run.pk), Counter())
        expected = _expected_effects(run)
        for op in expected:
            if effects.get(op, 0) != 1:
                bad.append(
                    f"SUCCEEDED {run.workflow} {run.pk}: {op} applied "
                    f"{effects.get(op, 0)}x, expected exactly once"
                )
    out.append(
        _inv(
            "side effects at most once per idempotency key (external ledgers), "
            "exactly once per SUCCEEDED run",
            checked,
            bad,
        )
    )

    bad = []
    status_events = defaultdict(list)
    for run_id, type_, seq in (
        Event.objects.filter(run_id__in=run_ids, type__startswith="run.")
        .order_by("run_id", "seq")
        .values_list("run_id", "type", "seq")
    ):
        status_events[run_id].append((type_, seq))
    for run_id, evs in status_events.items():
        terminal = [(t, s) for t, s in evs if t in TERMINAL_EVENTS]
        if not terminal:
            continue
        first_type, first_seq = terminal[0]
        later = [
            t
            for t, s in evs
            if s > first_seq
            and t != "run.resume_requested"
            and not t.startswith("run.cancel_waiting")
        ]
        if later or TERMINAL_EVENTS[first_type] != runs[run_id].status:
            bad.append(f"run {run_id}: {first_type} then {later or runs[run_id].status}")
    out.append(_inv("no terminal state ever changed (event log)", len(status_events), bad))

    bad = []
    seqs = (
        Event.objects.filter(run_id__in=run_ids)
        .values("run_id")
        .annotate(n=Count("id"), lo=Min("seq"), hi=Max("seq"))
    )
    for row in seqs:
        run = runs[row["run_id"]]
        if not (row["lo"] == 1 and row["hi"] == row["n"] == run.event_seq):
            bad.append(
                f"run {run.pk}: {row['n']} events, seq {row['lo']}..{row['hi']}, "
                f"event_seq {run.event_seq}"
            )
    out.append(_inv("event seqs gap-free per run", len(seqs), bad))

    bad = []
    commits = (
        Event.objects.filter(run_id__in=run_ids, type="step.succeeded")
        .values("step_id")
        .annotate(n=Count("id"))
    )
    for commit in commits:
        if commit["n"] > 1:
            bad.append(f"step {commit['step_id']} committed {commit['n']}x")
    out.append(_inv("no two attempts of one step committed", len(commits), bad))

    bad = []
    decisions: Counter[str | None] = Counter()
    for payload in Event.objects.filter(
        run_id__in=run_ids, type__in=["approval.approved", "approval.rejected", "approval.expired"]
    ).values_list("payload", flat=True):
        decisions[payload.get("approval_id")] += 1
    for approval_id, n in decisions.items():
        if n > 1:
            bad.append(f"approval {approval_id} decided {n}x")
    approvals = Approval.objects.filter(run_id__in=run_ids).count()
    out.append(_inv("every approval decided at most once", approvals, bad))
    return out


def _expected_effects(run: Run) -> list[str]:
    """Effects a SUCCEEDED run of this workflow must have applied exactly once."""
    if run.workflow == "synthetic_order":
        return ["inventory.reserve", "payments.charge", "mailer.send"]
    if run.workflow == "dim_lights":
        step = Step.objects.filter(run=run, name="set_brightness", status="SUCCEEDED").first()
        return ["lamp.set_brightness"] if step and not _resolved_by_operator(run) else []
    if run.workflow == "weekly_report":
        published = Step.objects.filter(run=run, name="publish", status="SUCCEEDED").exists()
        return ["publisher.publish"] if published else []
    return []


def _resolved_by_operator(run: Run) -> bool:
    return Event.objects.filter(run=run, type="takeover.resolved").exists()


def format_report(report: SoakReport) -> str:
    """The invariant table and the numbers, seed first."""
    lines = [
        f"seed: {report.seed}   (replay: --seed {report.seed})",
        f"runs: {report.runs}  statuses: {report.statuses}",
        f"faults injected: {report.faults}  workers started: {report.workers_started}  "
        f"time: {report.seconds:.0f}s",
        "",
        f"{'invariant':<92} {'checked':>7}  result",
    ]
    for inv in report.invariants:
        lines.append(f"{inv.name:<92} {inv.checked:>7}  {'held' if inv.held else 'VIOLATED'}")
        lines += [f"    - {v}" for v in inv.violations]
    lines.append("all invariants held" if report.ok else "INVARIANTS VIOLATED")
    return "\n".join(lines)
