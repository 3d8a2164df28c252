from django.apps import AppConfig


class RunsConfig(AppConfig):
    """Wires the engine when the app starts: every hook, sweep task and check is
    registered here by name, so this method is the list of what runs besides the code
    a caller calls (registering one name twice raises ``ValueError``)."""

    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # Workflows register themselves on import; every process needs the same set.
        from runs.workflows import registry

        registry.autodiscover()
        # Model providers, and a check of every model the settings and workflows name.
        from runs.agents.config import configure

        configure()
        _check_token_counter()
        _register_run_hooks()
        _register_sweep_tasks()
        _register_checks()
        # Bounds lock and statement waits on every PostgreSQL connection.
        from agentops import db_session

        db_session.install()


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


def _register_run_hooks() -> None:
    """What runs inside a run's transaction and after a run ends."""
    from runs.engine.control import children, preconditions
    from runs.engine.data import inbox
    from runs.engine.state import concurrency, gateway

    # A client's If-Match precondition is checked under the run lock of its action.
    gateway.register_run_locked_hook("preconditions", preconditions.check_locked)
    # A run's end starts the run of its thread's next queued message (without it no
    # process starts that run when the run before it ends).
    gateway.register_run_finished_hook("queued_messages", inbox.on_run_finished)
    # A child run's end wakes the parent step waiting for it; a parent's end cancels its
    # attached children.
    gateway.register_run_finished_hook("child_runs", children.on_run_finished)
    # A run's end under RQ notifies the next runs waiting for its concurrency key's place
    # (database polling finds them on its next poll).
    gateway.register_run_finished_hook("concurrency_places", concurrency.notify_next)


def _register_sweep_tasks() -> None:
    """Sweeper tasks beyond leases and notifications, each the safety net of something a
    process may have died in the middle of, and what wakes the sweeper early."""
    from runs.engine.control import approvals, cancel, children, lifecycle, schedules, waits
    from runs.engine.data import inbox
    from runs.engine.effects import compensation
    from runs.engine.execution import liveness, sweeper, watchdog

    sweeper.register_task("compensations", compensation.sweep_compensations)
    sweeper.register_task("queued_messages", inbox.promote_queued)
    sweeper.register_task("cancels_finished", cancel.finish_requested_cancels)
    # Expired approvals take their workflow's expiry route on the next sweep.
    sweeper.register_task("approvals_expired", approvals.expire_approvals)
    sweeper.register_task("stuck_flagged", watchdog.flag_stuck_runs)
    sweeper.register_task("dead_owners", liveness.release_dead_owners)
    # After "dead_owners": once a dead worker's steps are given back, the pause completes.
    sweeper.register_task("pauses_settled", lifecycle.settle_requested_pauses)
    # Signal waits past their deadline take their timeout route; due schedule ticks
    # start their runs. The sweeper wakes when either falls due.
    sweeper.register_task("signal_waits_timed_out", waits.expire_signal_waits)
    sweeper.register_task("schedule_runs_started", schedules.fire_due_schedules)
    sweeper.register_next_due("signal_deadline", waits.next_deadline)
    sweeper.register_next_due("schedule_tick", schedules.next_fire_at)
    sweeper.register_task("child_runs_settled", children.settle_children)


def _register_checks() -> None:
    """The durability checks: the connection's commit guarantees (with database checks,
    e.g. ``migrate``) and the servers' settings (``check --deploy``)."""
    from django.core.checks import Tags, register

    from runs import checks

    register(checks.check_durability, Tags.database)
    register(checks.check_stores, deploy=True)
