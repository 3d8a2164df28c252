from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # Workflows register themselves on import; every process needs the same set.
        from runs.workflows import registry

        registry.autodiscover()
        # Registers the sweeper task that finishes interrupted compensations.
        import runs.engine.compensation  # noqa: F401

        _register_sweep_tasks()


def _register_sweep_tasks() -> None:
    """Sweeper tasks beyond leases and notifications (issue 4): finish cancels whose
    worker died, and flag stuck runs."""
    from runs.engine import cancel, sweeper, watchdog

    sweeper.EXTRA_TASKS.setdefault("cancels_finished", cancel.finish_requested_cancels)
    sweeper.EXTRA_TASKS.setdefault("stuck_flagged", watchdog.flag_stuck_runs)
