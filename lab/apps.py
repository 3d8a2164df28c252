from django.apps import AppConfig


class LabConfig(AppConfig):
    """The lab: drills, soak, bench, the simulator and its workflows, the demo. Its
    ``ready`` registers, each by name, the ``sim`` model provider (the default model),
    the simulator's workflows, ``runs status``'s device extras and the fault hooks."""

    name = "lab"
    verbose_name = "Test lab"

    def ready(self) -> None:
        # Before the runs app's start-up check of the default model and the workflows'
        # models (the lab comes first in INSTALLED_APPS).
        from lab import workflows
        from lab.sim import provider
        from runs.workflows import registry

        provider.register()
        before = set(registry.names())
        workflows.register()
        _register_status_extras(set(registry.names()) - before)
        # Fault injection (``runs start --crash-before`` and the others) acts at the
        # engine's hook points; its flags are offered by ``runs start``.
        from lab import fault_flags, injection

        injection.install()
        fault_flags.register()


def _register_status_extras(lab_workflows: set[str]) -> None:
    """``runs status`` shows the simulated devices' calls and readings for a run of one
    of ``lab_workflows`` (the lab's own workflows, by name), the only ones that drive
    the simulated devices; a run of any other workflow shows none. The engine does not
    import the simulator."""
    import json

    from lab.sim.devices import device_calls, device_readings
    from runs.engine.control import lifecycle

    def calls(run):
        return device_calls(str(run.pk)) if run.workflow in lab_workflows else None

    def readings(run):
        return device_readings() if run.workflow in lab_workflows else None

    lifecycle.register_status_extra(
        "calls", calls, lambda value: f"device calls: {json.dumps(value)}"
    )
    lifecycle.register_status_extra(
        "devices", readings, lambda value: f"devices: {json.dumps(value)}"
    )
