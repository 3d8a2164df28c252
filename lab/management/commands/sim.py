"""``python manage.py sim status [--json]`` and ``sim reset``: look at and restore the
simulated outside world (every device in ``lab.sim``'s registry: thermostat, lamp,
publisher, news feed, booking, payments, inventory, mailer, shop) under
``AGENTOPS_DEVICE_DIR``."""

import json

from django.conf import settings

from lab.sim import devices
from runs.cli.command import OperatorCommand


class Command(OperatorCommand):
    help = "Show (status) or restore (reset) the simulated devices the demos and drills use."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        status = sub.add_parser(
            "status", help="each device's state, call-log size and armed faults"
        )
        status.add_argument("--json", action="store_true", help="print one JSON object")
        sub.add_parser(
            "reset",
            help="every device back to its initial state (lamp at 80%%, readable), call "
            "logs emptied, armed faults disarmed",
        )

    def handle(self, *args, action: str, **options):
        if action == "reset":
            names = devices.reset_world()
            self.stdout.write(
                f"reset {len(names)} simulated devices in {settings.AGENTOPS_DEVICE_DIR}: "
                + ", ".join(names)
            )
            return
        status = devices.world_status()
        if options["json"]:
            self.stdout.write(json.dumps(status, sort_keys=True))
            return
        self.stdout.write(f"simulated devices in {settings.AGENTOPS_DEVICE_DIR}")
        for name, info in status.items():
            if name == "faults":
                continue
            state = json.dumps(info["state"], sort_keys=True)
            if len(state) > 160:
                state = state[:157] + "..."
            self.stdout.write(f"  {name:<11} {info['calls']:>5} calls  state {state}")
        armed = status["faults"]
        self.stdout.write(
            "armed faults: "
            + (", ".join(f"{op} x{len(items)}" for op, items in armed.items()) or "none")
        )
