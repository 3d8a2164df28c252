from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # Workflows register themselves on import; every process needs the same set.
        from runs.workflows import registry

        registry.autodiscover()
        # Model providers, and a check of every model the settings and workflows name.
        from runs.agents.config import configure

        configure()
        # Registers the run-lock hook that checks clients' If-Match preconditions.
        import runs.engine.control.preconditions  # noqa: F401

        _check_token_counter()
        # Registers the sweeper task that finishes interrupted compensations.
        import runs.engine.effects.compensation  # noqa: F401

        _register_sweep_tasks()
        # Bounds lock and statement waits on every PostgreSQL connection.
        import agentops.db_session  # noqa: F401

        # Registers the thread-queue hook and sweep task (without them no process starts
        # a queued message's run when the run before it ends), and the durability check.
        import runs.engine.data.inbox  # noqa: F401
        from runs import checks  # noqa: F401


def _check_token_counter() -> None:
    """A token counter that cannot be imported stops start-up, not the first summary."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.utils.module_loading import import_string

    try:
        counter = import_string(settings.AGENTOPS_TOKEN_COUNTER)
    except ImportError as exc:
        raise ImproperlyConfigured(f"AGENTOPS_TOKEN_COUNTER: {exc}") from None
    if not callable(counter):
        raise ImproperlyConfigured(
            f"AGENTOPS_TOKEN_COUNTER={settings.AGENTOPS_TOKEN_COUNTER!r} is not callable"
        )


def _register_sweep_tasks() -> None:
    """Sweeper tasks beyond leases and notifications: finish cancels and requested
    pauses whose worker died, expire approvals, flag stuck runs, release the steps of
    workers known to be dead, time out signal waits and fire schedule ticks."""
    from runs.engine.control import approvals, cancel, lifecycle, schedules, waits
    from runs.engine.execution import liveness, sweeper, watchdog

    sweeper.EXTRA_TASKS.setdefault("cancels_finished", cancel.finish_requested_cancels)
    # Expired approvals take their workflow's expiry route on the next sweep.
    sweeper.EXTRA_TASKS.setdefault("approvals_expired", approvals.expire_approvals)
    sweeper.EXTRA_TASKS.setdefault("stuck_flagged", watchdog.flag_stuck_runs)
    sweeper.EXTRA_TASKS.setdefault("dead_owners", liveness.release_dead_owners)
    # After "dead_owners": once a dead worker's steps are given back, the pause completes.
    sweeper.EXTRA_TASKS.setdefault("pauses_settled", lifecycle.settle_requested_pauses)
    # Signal waits past their deadline take their timeout route; due schedule ticks
    # start their runs. The sweeper wakes when either falls due.
    sweeper.EXTRA_TASKS.setdefault("signal_waits_timed_out", waits.expire_signal_waits)
    sweeper.EXTRA_TASKS.setdefault("schedule_runs_started", schedules.fire_due_schedules)
    sweeper.NEXT_DUE.setdefault("signal_deadline", waits.next_deadline)
    sweeper.NEXT_DUE.setdefault("schedule_tick", schedules.next_fire_at)
    _register_child_runs()
    _register_concurrency()


def _register_concurrency() -> None:
    """A run's end under RQ notifies the next runs waiting for its concurrency key's
    place (database polling finds them on its next poll)."""
    from runs.engine.state import concurrency, gateway

    if concurrency.notify_next not in gateway.RUN_FINISHED_HOOKS:
        gateway.RUN_FINISHED_HOOKS.append(concurrency.notify_next)


def _register_child_runs() -> None:
    """A child run's end wakes the parent step waiting for it, a parent's end cancels its
    attached children; the sweeper does both for a process that died in between."""
    from runs.engine.control import children
    from runs.engine.execution import sweeper
    from runs.engine.state import gateway

    if children.on_run_finished not in gateway.RUN_FINISHED_HOOKS:
        gateway.RUN_FINISHED_HOOKS.append(children.on_run_finished)
    sweeper.EXTRA_TASKS.setdefault("child_runs_settled", children.settle_children)
