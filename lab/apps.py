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

        provider.register()
        workflows.register()
        _register_status_extras()
        # Fault injection (``runs start --crash-before`` and the others) acts at the
        # engine's hook points; its flags are offered by ``runs start``.
        from lab import fault_flags, injection

        injection.install()
        fault_flags.register()


def _register_status_extras() -> None:
    """``runs status`` shows the simulated devices' calls and readings (the engine does
    not import the simulator)."""
    from lab.sim.devices import device_calls, device_readings
    from runs.engine.control import lifecycle

    lifecycle.register_status_extra("calls", lambda run: device_calls(str(run.pk)))
    lifecycle.register_status_extra("devices", lambda run: device_readings())
