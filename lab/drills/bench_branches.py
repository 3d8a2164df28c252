"""``bench`` part ``branches``: one ``fanout_demo`` run whose map step fans out into N
branches, each waiting S seconds in its outside call, drained by W worker processes of
K execution slots (RQ, PostgreSQL).

Reported: the run's wall time (created to finished), branch throughput (branches over
the span from the fan-out's commit to the last branch's commit) against the ideal
``min(W x K, N) / S``, the join's latency (the last branch's commit to the join step's
start, and to the run's end), how long the last branch waited for its first claim
after the fan-out, the average branches in flight, and how often each branch ran
(attempts and recorded calls: one each when nothing failed). Nothing asserts on time.
"""

from typing import NamedTuple

from lab.drills.sandbox import Sandbox, wait_until
from runs.engine.control.lifecycle import start_run
from runs.models import Event, Operation, Run, Step, WorkerProcess
from runs.states import RUN_TERMINAL


class BranchesShape(NamedTuple):
    """The branches part: ``items`` branches waiting ``delay_s`` seconds each, drained
    by ``workers`` processes of ``slots`` execution slots."""

    items: int = 100
    delay_s: float = 1.0
    workers: int = 2
    slots: int = 64


DEFAULT_BRANCHES = BranchesShape()


def bench_branches(shape: BranchesShape, say, *, timeout: float | None = None) -> dict:
    """Run the part (module docstring) in its own sandbox; returns its figures."""
    items, delay_s, workers, slots = shape
    say(
        f"branches: fanout_demo with {items} items waiting {delay_s}s each, "
        f"{workers} workers x {slots} slots"
    )
    env = {"AGENTOPS_WORKER_CONCURRENCY": str(slots)}
    with Sandbox("branches", env=env) as box:
        for _ in range(workers):
            box.start_worker()
        # The workers are up (registered) before the run starts: start-up is not the
        # run's time.
        wait_until(lambda: _live_workers() >= workers, timeout=120)
        run = start_run(
            "fanout_demo",
            thread_id="bench-branches",
            input={"items": items, "delay_s": delay_s},
            actor="bench",
        )
        done = wait_until(
            lambda: Run.objects.filter(pk=run.pk, status__in=RUN_TERMINAL).exists(),
            timeout=timeout or max(300, 20 * items * delay_s / max(1, workers * slots)),
            interval=0.05,
        )
        box.stop_workers(timeout=60 + delay_s)
        failed = box.dead_workers(tail=3) if not done else []
        return branches_figures(
            Run.objects.get(pk=run.pk), shape, completed=bool(done), dead_workers=failed
        )


def _live_workers() -> int:
    return WorkerProcess.objects.filter(stopped_at__isnull=True).count()


def branches_figures(run: Run, shape: BranchesShape, **about) -> dict:
    """The figures of the part from the run's rows."""
    branches = list(
        Step.objects.filter(run=run, branch_of__isnull=False).values_list(
            "attempt", "started_at", "finished_at", "status"
        )
    )
    fanned = (
        Event.objects.filter(run=run, type="step.fanned_out")
        .values_list("created_at", flat=True)
        .first()
    )
    join = Step.objects.filter(run=run, branch_of__isnull=True).order_by("-seq").first()
    finished = [f for _, _, f, _ in branches if f is not None]
    last_branch = max(finished) if finished else None
    span = (last_branch - fanned).total_seconds() if last_branch and fanned else None
    ideal = min(shape.workers * shape.slots, shape.items) / shape.delay_s if shape.delay_s else None
    per_s = len(finished) / span if span else None
    calls = Operation.objects.filter(run=run).count()
    started = [s for _, s, _, _ in branches if s is not None]
    busy = sum((f - s).total_seconds() for _, s, f, _ in branches if s and f)
    return {
        **shape._asdict(),
        **about,
        "status": run.status,
        "wall_s": round((run.finished_at - run.created_at).total_seconds(), 3)
        if run.finished_at
        else None,
        "branches": len(branches),
        "branches_per_s": round(per_s, 1) if per_s else None,
        "ideal_branches_per_s": round(ideal, 1) if ideal else None,
        "ratio_to_ideal": round(per_s / ideal, 3) if per_s and ideal else None,
        "join_start_ms": round((join.started_at - last_branch).total_seconds() * 1000, 1)
        if join and join.started_at and last_branch and join.name != "fetch"
        else None,
        "join_end_ms": round((run.finished_at - last_branch).total_seconds() * 1000, 1)
        if run.finished_at and last_branch
        else None,
        "claim_spread_s": round((max(started) - fanned).total_seconds(), 3)
        if started and fanned
        else None,
        "avg_in_flight": round(busy / span, 1) if span else None,
        "max_attempts": max((a for a, _, _, _ in branches), default=None),
        "recorded_calls": calls,
        "notes": "throughput over the fan-out's commit to the last branch's commit; "
        "claim spread: the fan-out's commit to the last branch's first start; in flight: "
        "the branches' summed claim-to-commit time over that span; "
        "ideal = min(workers x slots, items) / delay; join latency from the last "
        "branch's commit (which schedules the join) to the join's start and to the "
        "run's end.",
    }
