"""Workflow versions: every run keeps the workflow name and version it started
with. When a worker reaches a run whose version this code does not register, it looks
for a registered version that declares ``migrate_from[old_version]`` and upgrades the
run's latest checkpoint with it; failing that, it pauses the run with an
``unknown_workflow_version`` takeover. A run is never restarted from the beginning:
resolving that takeover (``resume``) after deploying code that knows the version
continues it at the step where it stopped.
"""

from runs.engine.control.takeovers import open_takeover
from runs.engine.state.gateway import run_transaction
from runs.models import Checkpoint, Run, Step
from runs.states import RUN_EXECUTABLE
from runs.workflows import registry
from runs.workflows.definition import Workflow


def migration_target(name: str, version: int) -> Workflow | None:
    """The newest registered version of ``name`` that can migrate from ``version``."""
    candidates = [
        wf for wf in registry.all_workflows() if wf.name == name and version in wf.migrate_from
    ]
    return max(candidates, key=lambda wf: wf.version) if candidates else None


def known_or_migratable(run: Run) -> bool:
    """True when this code can execute ``run``: its version is registered or a
    registered version migrates from it."""
    try:
        registry.get(run.workflow, run.workflow_version)
        return True
    except registry.UnknownWorkflow:
        return migration_target(run.workflow, run.workflow_version) is not None


def workflow_for(run: Run, step: Step, worker_id: str) -> Workflow | None:
    """The definition to execute ``step`` of ``run`` with: the run's own version, or a
    newer one after migrating the run's checkpoint (``workflow.migrated`` event; the run's
    ``workflow_version`` is updated in place). Returns ``None`` after pausing the run with
    an ``unknown_workflow_version`` takeover (or when another process just did)."""
    try:
        return registry.get(run.workflow, run.workflow_version)
    except registry.UnknownWorkflow:
        pass
    target = migration_target(run.workflow, run.workflow_version)
    if target is not None and target.has(step.name):
        return _migrate(run, target, worker_id)
    pause_unknown_version(
        run,
        step,
        worker_id,
        "a newer version exists but has no step " + step.name if target else "",
    )
    return None


def _migrate(run: Run, target: Workflow, worker_id: str) -> Workflow | None:
    old = run.workflow_version
    with run_transaction(run.pk) as tx:
        if tx.run.workflow_version != old:  # another worker migrated first
            run.workflow_version = tx.run.workflow_version
            return registry.get(run.workflow, run.workflow_version)
        if tx.run.status not in RUN_EXECUTABLE:
            return None
        latest = (
            Checkpoint.objects.filter(run_id=run.pk, generation=tx.run.generation)
            .order_by("-pk")
            .first()
        )
        state = target.migrate_from[old](dict(latest.state if latest else {}))
        state["workflow_version"] = target.version
        name = f"migrated:v{old}-v{target.version}"
        Checkpoint.objects.create(  # type: ignore[misc]  # state is a property setter
            run_id=run.pk,
            step_id=latest.step_id if latest else None,
            name=name,
            generation=tx.run.generation,
            state=state,
        )
        Run.objects.filter(pk=run.pk).update(workflow_version=target.version)
        tx.event(
            "workflow.migrated",
            {"from_version": old, "to_version": target.version, "checkpoint": name},
            actor=worker_id,
        )
    run.workflow_version = target.version
    return target


def pause_unknown_version(run: Run, step: Step, worker_id: str, detail: str = "") -> None:
    """Pause ``run`` (PENDING or RUNNING) with an ``unknown_workflow_version`` takeover at
    ``step``, as the worker ``worker_id`` that reached it; ``detail`` is added to the
    reason. Does nothing when the run is no longer executable."""
    known = sorted(wf.version for wf in registry.all_workflows() if wf.name == run.workflow)
    with run_transaction(run.pk) as tx:
        if tx.run.status not in RUN_EXECUTABLE:
            return
        open_takeover(
            tx,
            cause="unknown_workflow_version",
            reason=f"this code has no workflow {run.workflow}@{run.workflow_version}"
            + (f" ({detail})" if detail else ""),
            actor=worker_id,
            step=step,
            suggested_action="Deploy code that registers this version (or a migration from "
            "it), then resolve the takeover with resume to continue.",
            evidence={
                "workflow": run.workflow,
                "version": run.workflow_version,
                "versions_known_here": known,
                "worker": worker_id,
                "step": step.name,
            },
        )
