"""RQ job entry point. The job carries ids only; everything else is read from the
database."""

from runs.engine.execution import executor
from runs.engine.execution.identity import current_worker


def execute_step_job(run_id: str, step_id: int, attempt: int = 0) -> None:
    """Execute ``step_id`` and, while this worker is not stopping, the steps that follow.

    ``attempt`` is the attempt the notifier saw; it is informational only, the claim's
    conditional UPDATE decides.
    """
    executor.run_chain(step_id, current_worker())
