"""Worker liveness in a deployment: the ``bench_hold`` run whose step holds until its
worker stops, and the signals and advisory locks the workers publish."""

from runs.engine.execution.liveness import LOCK_NAMESPACE
from tests.support.deployment_runs import db_id, db_rows
from tests.support.services import Deployment
from tests.support.waiting import wait_until

#: The liveness signal a worker publishes, by backend.
SIGNAL = {"postgres": "pg", "sqlite": "pid"}


def start_hold(d: Deployment, thread: str) -> str:
    """``runs start bench_hold`` (a step that holds until stopped); returns the run id."""
    return d.manage(
        "runs", "start", "bench_hold", "--thread", thread, "--input", "{}", check=True
    ).stdout.strip()


def hold_step(d: Deployment, run_id: str) -> tuple | None:
    """The run's ``hold`` step as ``(status, attempt, owner)``, or None before it exists."""
    rows = db_rows(
        d,
        "SELECT status, attempt, owner FROM runs_step WHERE run_id = %s AND name = 'hold'",
        (db_id(d, run_id),),
    )
    return rows[0] if rows else None


def live_signals(d: Deployment) -> list[str]:
    """The liveness signal ("pg", "pid" or "") of each worker process not stopped."""
    return [
        r[0] for r in db_rows(d, "SELECT liveness FROM runs_workerprocess WHERE stopped_at IS NULL")
    ]


def wait_locks_released(d: Deployment) -> None:
    """Wait until no worker's advisory lock is held: the server drops a killed worker's
    lock when it notices the closed socket."""
    wait_until(
        lambda: not db_rows(
            d,
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s::oid",
            (LOCK_NAMESPACE,),
        ),
        what="the killed worker's advisory lock to go",
    )
