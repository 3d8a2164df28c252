from django.apps import AppConfig


class LabConfig(AppConfig):
    name = "lab"
    verbose_name = "Test lab"

    def ready(self) -> None:
        _register_status_extras()
        # Fault injection (``runs start --crash-before`` and the others) acts at the
        # engine's hook points.
        from lab import injection

        injection.install()


def _register_status_extras() -> None:
    """``runs status`` shows the simulated devices' calls and readings (the engine does
    not import the simulator)."""
    from lab.sim.devices import device_calls, device_readings
    from runs.engine.control import lifecycle

    lifecycle.register_status_extra("calls", lambda run: device_calls(str(run.pk)))
    lifecycle.register_status_extra("devices", lambda run: device_readings())
