from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals and takeovers"

    def ready(self) -> None:
        # Expired approvals take their workflow's expiry route on the next sweep.
        from approvals import services
        from runs.engine.execution import sweeper

        sweeper.EXTRA_TASKS.setdefault("approvals_expired", services.expire_approvals)
