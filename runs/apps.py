from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # Workflows register themselves on import; every process needs the same set.
        from runs.workflows import registry

        registry.autodiscover()
        # Registers the thread-queue hook and sweep task, and the durability check.
        from runs import checks  # noqa: F401
        from runs.engine import inbox  # noqa: F401
