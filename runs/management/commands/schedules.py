"""``python manage.py schedules list|add|pause|resume|trigger|delete``: runs of a workflow
started on a cron expression or an interval (``runs.engine.control.schedules``)."""

import json

from django.core.management.base import CommandError

from runs.cli import arguments
from runs.cli.command import OperatorCommand
from runs.cli.common import control_error
from runs.engine.service import (
    ControlError,
    create_schedule,
    delete_schedule,
    describe_schedule,
    set_schedule_paused,
    timing_of,
    trigger_schedule,
)
from runs.models import Schedule, ScheduleTick


class Command(OperatorCommand):
    help = "List, add, pause, resume, trigger and delete schedules."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = sub.add_parser("list", help="every schedule, its next ticks and last runs")
        listing.add_argument("--json", action="store_true", help="print JSON")
        add = sub.add_parser("add", help="a new schedule")
        add.add_argument(
            "name",
            type=arguments.identifier("schedule"),
            help="a unique name (letters, digits, . _ -)",
        )
        add.add_argument(
            "--workflow",
            required=True,
            type=arguments.identifier("workflow"),
            help="a registered workflow (its latest version at each tick)",
        )
        timing = add.add_mutually_exclusive_group(required=True)
        timing.add_argument("--cron", type=arguments.required_text, help='e.g. "0 9 * * 1"')
        timing.add_argument(
            "--every",
            type=arguments.seconds(code="invalid_input"),
            metavar="SECONDS",
            help="an interval",
        )
        add.add_argument(
            "--tz",
            default=None,
            type=arguments.required_text,
            help="the cron's time zone (default UTC)",
        )
        add.add_argument(
            "--input", default="{}", type=arguments.json_object(), help="each run's input"
        )
        add.add_argument(
            "--overlap",
            type=arguments.choice(Schedule.Overlap.values, "invalid_input"),
            metavar="{" + ",".join(Schedule.Overlap.values) + "}",
            default="skip",
            help="skip a tick while the previous run is open (default), or allow it",
        )
        add.add_argument(
            "--catchup",
            type=arguments.choice(Schedule.Catchup.values, "invalid_input"),
            metavar="{" + ",".join(Schedule.Catchup.values) + "}",
            default="latest",
            help="missed ticks after downtime: none, the latest (default), or all",
        )
        add.add_argument(
            "--catchup-window",
            type=arguments.seconds(code="invalid_input"),
            default=3600,
            metavar="SECONDS",
            help="how far back --catchup all goes",
        )
        for action, text in (
            ("pause", "stop ticking (ticks while paused are not caught up)"),
            ("resume", "tick again from now"),
            ("trigger", "a tick now (the overlap policy applies)"),
            ("delete", "delete the schedule (its runs stay)"),
        ):
            sub.add_parser(action, help=text).add_argument(
                "name", type=arguments.identifier("schedule"), help="the schedule"
            )

    def handle(self, *args, action: str, **options):
        try:
            getattr(self, f"_{action}")(options)
        except ControlError as exc:
            raise control_error(exc) from exc

    def _list(self, options):
        rows = [describe_schedule(s) for s in Schedule.objects.order_by("name")]
        if options["json"]:
            self.stdout.write(json.dumps(rows))
            return
        if not rows:
            self.stdout.write("no schedules (add one with: schedules add NAME --workflow W ...)")
        for row in rows:
            state = "paused" if row["paused"] else "next " + ", ".join(row["next_fire_times"])
            self.stdout.write(
                f"{row['name']}: {row['workflow']} {row['timing']} overlap={row['overlap']} "
                f"catchup={row['catchup']}; {state}"
            )
            for tick in row["last_ticks"]:
                self.stdout.write(f"  {tick['tick_at']} {tick['outcome']} {tick['run'] or ''}")

    def _add(self, options):
        schedule = create_schedule(
            options["name"],
            options["workflow"],
            cron=options["cron"],
            timezone=options["tz"],
            every=options["every"],
            input=options["input"],
            overlap=options["overlap"],
            catchup=options["catchup"],
            catchup_window=options["catchup_window"],
        )
        self.stdout.write(
            f"schedule {schedule.name}: {timing_of(schedule).describe()}, "
            f"next tick {schedule.next_fire_at.isoformat() if schedule.next_fire_at else '-'}"
        )

    def _pause(self, options):
        schedule = set_schedule_paused(options["name"], True)
        self.stdout.write(f"schedule {schedule.name}: paused")

    def _resume(self, options):
        schedule = set_schedule_paused(options["name"], False)
        when = schedule.next_fire_at.isoformat() if schedule.next_fire_at else "-"
        self.stdout.write(f"schedule {schedule.name}: resumed, next tick {when}")

    def _trigger(self, options):
        tick = trigger_schedule(options["name"], "cli")
        if tick.outcome != ScheduleTick.Outcome.STARTED:
            raise CommandError(f"schedule {options['name']}: tick {tick.outcome}: {tick.detail}")
        self.stdout.write(f"schedule {options['name']}: started run {tick.run_id}")

    def _delete(self, options):
        delete_schedule(options["name"])
        self.stdout.write(f"schedule {options['name']}: deleted")
