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
